"""`python -m bench [name ...]`: run bench/<name>.py main() for each name (all when none given)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

# Modules the benches use, not benches themselves.
HELPERS = frozenset({"common", "floor", "langgraph_cycle", "wire"})


def available() -> list[str]:
    here = Path(__file__).parent
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(here)])
        if not m.name.startswith("_") and m.name not in HELPERS
    )


def main(argv: list[str]) -> int:
    names = argv or available()
    for name in names:
        if name not in available():
            print(f"unknown benchmark {name!r}; have: {', '.join(available())}", file=sys.stderr)
            return 2
    for name in names:
        print(f"\n=== bench {name} ===", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
