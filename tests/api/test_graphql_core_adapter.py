"""The canary of `backend/api/graphql_core_adapter.py`: every graphql-core internal that the API's
executor relies on is still there, with the shape it relies on, and the installed graphql-core is the
version those names were checked against. After an upgrade this fails first, and says which names to
re-check (in the new version's source) before `CHECKED` is moved on."""

from __future__ import annotations

import pytest

from backend.api import graphql_core_adapter as adapter
from backend.api.strawberry_adapter import Reliance
from backend.config import Settings
from tests.api.test_strawberry_adapter import assert_checked_versions, assert_still_there, reliance_id

_WHERE = "backend/api/graphql_core_adapter.py"


def test_the_installed_graphql_core_is_the_version_the_names_were_checked_against() -> None:
    assert_checked_versions(adapter, _WHERE, "tests/api/test_plain_execution.py and tests/api/test_fanout.py")


@pytest.mark.parametrize("reliance", adapter.RELIED_ON, ids=reliance_id)
def test_each_relied_on_name_is_still_there(reliance: Reliance) -> None:
    assert_still_there(reliance, adapter.installed_versions(), _WHERE)


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNWISE_GRAPHQL_CORE_ADAPTER", raising=False)
    monkeypatch.delenv("TURNWISE_WS_ADAPTER", raising=False)
    assert Settings.from_env().graphql_core_adapter
    assert adapter.executor_class() is adapter.PlainFieldExecutor
    assert adapter.executor_class(False) is None
    for off in ("0", "false", "No"):
        monkeypatch.setenv("TURNWISE_GRAPHQL_CORE_ADAPTER", off)
        assert not Settings.from_env().graphql_core_adapter
        assert adapter.executor_class() is None
