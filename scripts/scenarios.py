"""`make scenarios`: the matrix requirement scenario -> tests that check it, from pytest's collection.

Prints every scenario id S01-S45 with the tests marked `@pytest.mark.scenario(id)` and the kinds of
pending action they run for (a test's `kind` parameter, or its `kinds` marker; a test with neither
runs for clarifications), flags the ids no test marks, and a scenario about a pending action that runs
for one kind only, and exits non-zero when there is one. Tests marked `@pytest.mark.scenario_note(id, note)`
(a documented decision that asserts another outcome than the scenario's THEN) are listed under their
scenario as `[id-note]` and do not count as checking it. `--json` prints {id: [test ids]} instead,
`--json-notes` prints {"id-note": [test ids]}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.scenarios import (  # noqa: E402
    KIND_NEUTRAL,
    PENDING_KINDS,
    SCENARIO_IDS,
    item_kinds,
    note_label,
    scenario_ids,
    scenario_notes,
)


class Collector:
    def __init__(self) -> None:
        self.matrix: dict[str, list[str]] = {s: [] for s in SCENARIO_IDS}
        # Scenario id -> kind of pending action -> tests that check it for that kind.
        self.kinds: dict[str, dict[str, list[str]]] = {
            s: {k: [] for k in PENDING_KINDS} for s in SCENARIO_IDS
        }
        # Scenario id -> {note label: tests}: tests that depart from the scenario's THEN on purpose.
        self.notes: dict[str, dict[str, list[str]]] = {s: {} for s in SCENARIO_IDS}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            # One row per test function: parametrized cases share their marks.
            name = item.nodeid.split("[", 1)[0]
            for sid in scenario_ids(item):
                if name not in self.matrix[sid]:
                    self.matrix[sid].append(name)
                for kind in item_kinds(item):
                    if name not in self.kinds[sid][kind]:
                        self.kinds[sid][kind].append(name)
            for sid, note in scenario_notes(item):
                noted = self.notes[sid].setdefault(note_label(sid, note), [])
                if name not in noted:
                    noted.append(name)


def run_collection() -> Collector:
    collector = Collector()
    code = pytest.main(
        ["--collect-only", "-q", "-p", "no:cacheprovider", str(REPO / "tests")], plugins=[collector]
    )
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise SystemExit(f"collection failed ({code})")
    return collector


def main(argv: list[str]) -> int:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        collector = run_collection()
    matrix = collector.matrix
    one_kind = {
        sid: [k for k, tests in by_kind.items() if not tests]
        for sid, by_kind in collector.kinds.items()
        if sid not in KIND_NEUTRAL and matrix[sid] and any(not t for t in by_kind.values())
    }
    if "--json" in argv:
        print(json.dumps(matrix, indent=1))
    elif "--json-kinds" in argv:
        print(json.dumps(collector.kinds, indent=1))
    elif "--json-notes" in argv:
        notes = {label: tests for by_label in collector.notes.values() for label, tests in by_label.items()}
        print(json.dumps(notes, indent=1))
    else:
        for sid, tests in matrix.items():
            by_kind = collector.kinds[sid]
            kinds = (
                "kind-neutral"
                if sid in KIND_NEUTRAL
                else ", ".join(f"{k} {len(by_kind[k])}" for k in PENDING_KINDS)
            )
            status = "MISSING: no test checks it" if not tests else f"{len(tests)} test(s); {kinds}"
            if sid in one_kind:
                status += f"; MISSING for {', '.join(one_kind[sid])}"
            print(f"{sid}  {status}")
            for test in tests:
                print(f"     {test}")
            for label, noted in collector.notes[sid].items():
                print(f"     {len(noted)} test(s) noted {label}: they assert another outcome by design")
                for test in noted:
                    print(f"     [{label}] {test}")
        missing = [s for s, t in matrix.items() if not t]
        print(f"\n{len(SCENARIO_IDS) - len(missing)} of {len(SCENARIO_IDS)} scenarios have tests", end="")
        print(f"; missing: {', '.join(missing)}" if missing else "")
        about_kinds = len(SCENARIO_IDS) - len(KIND_NEUTRAL)
        print(
            f"{about_kinds - len(one_kind)} of {about_kinds} scenarios about a pending action"
            " run for both kinds",
            end="",
        )
        print(f"; one kind only: {', '.join(one_kind)}" if one_kind else "")
    return 1 if any(not t for t in matrix.values()) or one_kind else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
