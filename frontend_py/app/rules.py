"""The rules panel: a session's remembered permission rules ("Allowed in this session") and Revoke."""

from pyscript import document, window  # type: ignore[import-not-found]

from frontend_py.app import queries
from frontend_py.app.page import Page, attr, js_none, spawn
from frontend_py.app.views import permission as view

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


class Rules:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.rules: dict[str, list[dict[str, Any]]] = {}
        self.busy: str | None = None  # the rule whose Revoke is on its way

    def actions(self) -> dict[str, Callable[[Any], None]]:
        return {"perm-revoke": self._on_revoke}

    def html(self, session_id: str) -> str:
        return view.rules(self.rules.get(session_id) or [], self.busy)

    async def load(self, session_id: str) -> None:
        try:
            data = await self.page.http.query(queries.PERMISSION_RULES, {"sessionId": session_id})
        except Exception as error:  # noqa: BLE001 - a failed background load is logged, the page lives on
            window.console.warn("loading the session's rules failed: " + str(error))
            return
        self.rules[session_id] = list(data.get("permissionRules") or [])
        self.page.render()

    def _on_revoke(self, target: Any) -> None:
        rule_id = attr(target, "data-rule-id")
        session_id = self.page.route_session
        if rule_id and session_id:
            spawn(self.revoke(session_id, rule_id))

    async def revoke(self, session_id: str, rule_id: str) -> None:
        if self.busy is not None:
            return
        self.busy = rule_id
        self.page.render()
        try:
            await self.page.http.query(queries.REVOKE_RULE, {"ruleId": rule_id})
        except Exception as error:  # noqa: BLE001 - the list is reloaded either way
            window.console.warn("revoking a rule failed: " + str(error))
        self.busy = None
        await self.load(session_id)
        active = document.activeElement
        if js_none(active) or active == document.body:
            document.getElementById("transcript").focus()  # the revoked rule's button is gone
