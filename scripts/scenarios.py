"""`make scenarios`: the matrix requirement scenario -> tests that check it, from pytest's collection.

Prints every scenario id S01-S45 with the tests marked `@pytest.mark.scenario(id)`, flags the ids no
test marks, and exits non-zero when there is one. `--json` prints {id: [test ids]} instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.scenarios import SCENARIO_IDS, scenario_ids  # noqa: E402


class Collector:
    def __init__(self) -> None:
        self.matrix: dict[str, list[str]] = {s: [] for s in SCENARIO_IDS}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            # One row per test function: parametrized cases share their marks.
            name = item.nodeid.split("[", 1)[0]
            for sid in scenario_ids(item):
                if name not in self.matrix[sid]:
                    self.matrix[sid].append(name)


def collect() -> dict[str, list[str]]:
    collector = Collector()
    code = pytest.main(
        ["--collect-only", "-q", "-p", "no:cacheprovider", str(REPO / "tests")], plugins=[collector]
    )
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise SystemExit(f"collection failed ({code})")
    return collector.matrix


def main(argv: list[str]) -> int:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        matrix = collect()
    if "--json" in argv:
        print(json.dumps(matrix, indent=1))
    else:
        for sid, tests in matrix.items():
            print(f"{sid}  {'MISSING: no test checks it' if not tests else f'{len(tests)} test(s)'}")
            for test in tests:
                print(f"     {test}")
        missing = [s for s, t in matrix.items() if not t]
        print(f"\n{len(SCENARIO_IDS) - len(missing)} of {len(SCENARIO_IDS)} scenarios have tests", end="")
        print(f"; missing: {', '.join(missing)}" if missing else "")
    return 1 if any(not t for t in matrix.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
