"""Production invariants are raised, never asserted: `python -O` strips every `assert`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from backend.domain.errors import BrokenInvariant, TurnwiseError, present

REPO = Path(__file__).resolve().parent.parent


def test_no_production_module_guards_anything_with_assert() -> None:
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for folder in ("backend", "frontend_py/app", "frontend_py/kit")
        for path in sorted((REPO / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assert)
    ]
    assert found == []


def test_a_missing_value_is_an_internal_error_naming_what_is_missing() -> None:
    assert present("x", "thing") == "x"
    with pytest.raises(BrokenInvariant, match="waiter's bundle is missing") as err:
        present(None, "waiter's bundle")
    # Not a client-facing error: the API reports it as INTERNAL with an error id.
    assert not isinstance(err.value, TurnwiseError)
