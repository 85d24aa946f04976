"""The open session's audit trail: ``decisions(sessionId)``, read with its history and again after
each of its events, and the input an edited allow changed (its decision line shows the diff)."""

from pyscript import window  # type: ignore[import-not-found]

from frontend_py.app import queries
from frontend_py.app.page import Page, spawn
from frontend_py.app.rules import Rules
from frontend_py.app.views import decisions as view

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


class Decisions:
    def __init__(self, page: Page, rules: Rules) -> None:
        self.page = page
        self.rules = rules
        self.by_session: dict[str, list[dict[str, Any]]] = {}
        self.originals: dict[str, Any] = {}  # pending id -> the input as asked, for an edited allow
        self._loading: set[str] = set()
        self._again: set[str] = set()

    async def load(self, session_id: str) -> None:
        """Read the session's decisions; a call while one is on its way reads once more after it."""
        if session_id in self._loading:
            self._again.add(session_id)
            return
        self._loading.add(session_id)
        try:
            while True:
                self._again.discard(session_id)
                data = await self.page.http.query(queries.SESSION_DECISIONS, {"sessionId": session_id})
                held = list(data.get("decisions") or [])
                self.by_session[session_id] = held
                for decision in held:
                    pending_id = str(decision.get("pendingId") or "")
                    if decision.get("edited") and pending_id not in self.originals:
                        self.originals[pending_id] = None
                        spawn(self._original(pending_id))
                self.page.render()
                if session_id not in self._again:
                    break
        except Exception as error:  # noqa: BLE001 - the history shows without its decision lines
            window.console.warn("loading the session's decisions failed: " + str(error))
        finally:
            self._loading.discard(session_id)

    async def _original(self, pending_id: str) -> None:
        try:
            data = await self.page.http.query(queries.PERMISSION_INPUT, {"pendingId": pending_id})
        except Exception as error:  # noqa: BLE001 - the line says "with an edit" without the diff
            window.console.warn("loading an edited request's input failed: " + str(error))
            return
        request = data.get("permission") if isinstance(data, dict) else None
        if isinstance(request, dict):
            self.originals[pending_id] = request.get("input")
            self.page.render()

    def _rule(self, session_id: str, rule_id: Any) -> str | None:
        for rule in self.rules.rules.get(session_id) or []:
            if rule.get("id") == rule_id:
                scope = str(rule.get("scope") or "SESSION").lower()
                return str(rule.get("pattern") or rule.get("toolName") or "") + ", " + scope + " scope"
        return None

    def placed(
        self, session_id: str, messages: list[dict[str, Any]]
    ) -> tuple[dict[str, list[str]], list[str]]:
        """The session's decision lines by the message they follow, and those that follow none."""
        held = self.by_session.get(session_id) or []
        lines = {}
        for decision in held:
            pending_id = str(decision.get("pendingId") or "")
            rule = self._rule(session_id, decision.get("ruleId"))
            lines[pending_id] = view.line(decision, self.originals.get(pending_id), rule)
        return view.placed(messages, held, lines)
