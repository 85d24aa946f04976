"""Scenario notes: a test that asserts another outcome than a scenario's THEN, by a documented decision,
is listed under that scenario as `Snn-note` and does not count as checking it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.resume import test_acknowledgement_deadline, test_detached_resume, test_restore_convergence
from tests.scenarios import MARKER, NOTE_MARKER

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]

CONFTEST = "from tests.scenarios import pytest_collection_modifyitems  # noqa: F401\n"
INI = (
    "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    "markers =\n    scenario(ids): numbered scenarios\n"
    "    scenario_note(id, note): departs from a scenario by design\n"
)


def matrix_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scenario_matrix", REPO / "scripts" / "scenarios.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    if str(REPO) not in sys.path:
        monkeypatch.syspath_prepend(str(REPO))
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(f"import pytest\n\n\n{body}")


def marks(function: Any, name: str) -> list[tuple[Any, ...]]:
    return [tuple(m.args) for m in getattr(function, "pytestmark", []) if m.name == name]


def test_a_noted_test_is_listed_under_its_scenario_and_does_not_count_as_checking_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(
        pytester,
        monkeypatch,
        '@pytest.mark.scenario("S34")\ndef test_restores() -> None:\n    pass\n\n\n'
        '@pytest.mark.scenario_note("S34", "ambiguous")\ndef test_keeps_terminal() -> None:\n    pass\n\n\n'
        '@pytest.mark.scenario_note("S35", "by-design")\ndef test_only_noted() -> None:\n    pass\n',
    )
    collector = matrix_script().Collector()
    result = pytester.inline_run("--collect-only", "-q", "-p", "no:cacheprovider", plugins=[collector])
    assert result.ret == pytest.ExitCode.OK
    assert [name.split("::")[-1] for name in collector.matrix["S34"]] == ["test_restores"]
    assert {label: [n.split("::")[-1] for n in tests] for label, tests in collector.notes["S34"].items()} == {
        "S34-ambiguous": ["test_keeps_terminal"]
    }
    # A scenario with only a noted test is still one no test checks.
    assert collector.matrix["S35"] == []
    assert list(collector.notes["S35"]) == ["S35-by-design"]


@pytest.mark.parametrize(
    ("marker", "complaint"),
    [
        ('@pytest.mark.scenario_note("S46", "ambiguous")', "unknown scenario id 'S46'"),
        ('@pytest.mark.scenario_note("S34")', "needs a scenario id and a note"),
        ('@pytest.mark.scenario_note("S34", "ambiguous", "more")', "needs a scenario id and a note"),
        ('@pytest.mark.scenario_note("S34", note="ambiguous")', "needs a scenario id and a note"),
        ('@pytest.mark.scenario_note("S34", "Ambiguous")', "must be lower-case words"),
        ('@pytest.mark.scenario_note("S34", "")', "must be lower-case words"),
        (
            '@pytest.mark.scenario("S34")\n@pytest.mark.scenario_note("S34", "ambiguous")',
            "checks S34 and departs",
        ),
    ],
)
def test_a_malformed_scenario_note_stops_collection(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, marker: str, complaint: str
) -> None:
    project(pytester, monkeypatch, f"{marker}\ndef test_marked() -> None:\n    pass\n")
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert complaint in result.stderr.str()


def test_the_two_ambiguous_silence_tests_are_noted_not_counted_for_s34() -> None:
    for function in (
        test_acknowledgement_deadline.test_silence_after_the_attempt_marker_is_ambiguous_terminal_and_never_sent_again,
        test_detached_resume.test_dispatch_sent_but_not_acknowledged_is_non_retryable_keeps_the_successor_and_is_never_resent,
    ):
        assert marks(function, NOTE_MARKER) == [("S34", "ambiguous")]
        assert marks(function, MARKER) == []
    # The tests S34 counts are the ones that check its THEN: silence before the marker restores.
    (restoring,) = (
        test_acknowledgement_deadline.test_silence_before_the_attempt_marker_is_a_failed_admission_that_restores_the_answer,
    )
    assert marks(restoring, MARKER) == [("S34",)]


def test_s39_is_carried_by_the_test_that_checks_the_acknowledgement_order() -> None:
    (ordered,) = (
        test_restore_convergence.test_restore_acknowledges_summary_convergence_before_reporting_retryability_and_publishes,
    )
    assert marks(ordered, MARKER) == [("S39",)]
