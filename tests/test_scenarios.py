"""Traceability: every numbered scenario has a marked test, and markers name only known scenarios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.scenarios import KIND_NEUTRAL, PENDING_KINDS, SCENARIO_IDS

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]


def test_the_scenario_ids_are_s01_to_s45_in_order() -> None:
    assert tuple(f"S{n:02d}" for n in range(1, 46)) == SCENARIO_IDS


def scenario_matrix(flag: str) -> Any:
    """What `scripts/scenarios.py <flag>` prints, parsed: the matrix as `make scenarios` sees it."""
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "scenarios.py"), flag],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return json.loads(run.stdout)


def test_every_scenario_has_a_marked_test() -> None:
    matrix = scenario_matrix("--json")
    assert list(matrix) == list(SCENARIO_IDS)
    missing = [sid for sid, tests in matrix.items() if not tests]
    assert missing == [], f"scenarios without a marked test: {', '.join(missing)}"


def test_every_scenario_about_a_pending_action_runs_for_both_kinds() -> None:
    kinds = scenario_matrix("--json-kinds")
    one_kind = {
        sid: [k for k in PENDING_KINDS if not by_kind[k]]
        for sid, by_kind in kinds.items()
        if sid not in KIND_NEUTRAL and not all(by_kind[k] for k in PENDING_KINDS)
    }
    assert one_kind == {}, f"scenarios that run for one kind of pending action only: {one_kind}"


@pytest.mark.parametrize(
    ("marker", "complaint"),
    [
        ('@pytest.mark.scenario("S46")', "unknown scenario ids ['S46']"),
        ('@pytest.mark.scenario("S7")', "unknown scenario ids ['S7']"),
        ('@pytest.mark.scenario("S01", "s02")', "unknown scenario ids ['s02']"),
        ("@pytest.mark.scenario()", "needs ids"),
    ],
)
def test_an_unknown_scenario_id_stops_collection(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, marker: str, complaint: str
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest("from tests.scenarios import pytest_collection_modifyitems  # noqa: F401\n")
    pytester.makeini("[pytest]\nmarkers =\n    scenario(ids): numbered scenarios\n")
    pytester.makepyfile(f"import pytest\n\n\n{marker}\ndef test_marked() -> None:\n    pass\n")
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert complaint in result.stderr.str()


def test_a_known_scenario_id_collects(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest("from tests.scenarios import pytest_collection_modifyitems  # noqa: F401\n")
    pytester.makeini("[pytest]\nmarkers =\n    scenario(ids): numbered scenarios\n")
    pytester.makepyfile(
        'import pytest\n\n\n@pytest.mark.scenario("S01", "S45")\ndef test_marked() -> None:\n    pass\n'
    )
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
