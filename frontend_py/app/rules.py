"""The rules panel: every permission rule that applies to the open session, with Revoke; importing a
Claude Code settings block into a scope and showing a scope's block to copy."""

import json

import js  # type: ignore[import-not-found]
from pyscript import document, window  # type: ignore[import-not-found]

from frontend_py.app import net, queries
from frontend_py.app.page import Page, attr, js_none, spawn
from frontend_py.app.views import rules as view

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

# "" when the text is strict JSON, else the browser's reason (MicroPython's json.loads is lenient).
STRICT_JSON = "try { JSON.parse(text); return ''; } catch (error) { return String(error.message || error); }"


class Rules:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.rules: dict[str, list[dict[str, Any]]] = {}
        self.busy: str | None = None  # the rule whose Revoke is on its way
        # The import and export form: open, scope, text, error, done, block, busy.
        self.form: dict[str, Any] = {}

    def actions(self) -> dict[str, Callable[[Any], None]]:
        return {
            "perm-revoke": self._on_revoke,
            "rules-manage": lambda _target: self._toggle(),
            "rules-scope": self._on_scope,
            "rules-import": lambda _target: spawn(self.import_block()),
            "rules-export": lambda _target: spawn(self.export_block()),
        }

    def html(self, session_id: str) -> str:
        return view.rules(self.rules.get(session_id) or [], self.busy) + view.manage(
            self.form, self._project() is not None
        )

    def render(self, session_id: str) -> None:
        """Draw the panel, keeping the focus (and a text box's caret) where it was."""
        slot = document.getElementById("rules")
        active = document.activeElement
        inside = not js_none(active) and bool(slot.contains(active))
        test_id = attr(active, "data-testid") if inside else None
        caret = None
        if inside and str(active.tagName) == "TEXTAREA":
            caret = (int(active.selectionStart), int(active.selectionEnd))
        if not self.page.set_html("rules", self.html(session_id)) or test_id is None:
            return
        target = slot.querySelector('[data-testid="' + test_id + '"]')
        if js_none(target):
            return
        target.focus()
        if caret is not None and str(target.tagName) == "TEXTAREA":
            target.setSelectionRange(caret[0], caret[1])

    def write(self, box: Any) -> None:
        if attr(box, "data-testid") == "rules-import-text":
            self.form["text"] = str(box.value)

    def opened(self, session_id: str | None) -> None:
        """Another session opened: the form starts over (its scope is the session's)."""
        if self.form.get("session") != session_id:
            self.form = {"session": session_id}

    async def load(self, session_id: str) -> None:
        try:
            data = await self.page.http.query(queries.PERMISSION_RULES, {"sessionId": session_id})
        except Exception as error:  # noqa: BLE001 - a failed background load is logged, the page lives on
            window.console.warn("loading the session's rules failed: " + str(error))
            return
        self.rules[session_id] = list(data.get("permissionRules") or [])
        self.page.render()

    # --- revoke ------------------------------------------------------------------------------------

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

    # --- import and export -------------------------------------------------------------------------

    def _toggle(self) -> None:
        self.form["open"] = not self.form.get("open")
        self.page.render()

    def _on_scope(self, target: Any) -> None:
        self.form["scope"] = attr(target, "data-scope") or "SESSION"
        self.form["block"] = None
        self.form["done"] = None
        self.page.render()

    def _project(self) -> str | None:
        task = self.page.store.task(self.page.route_task) if self.page.route_task else None
        project = (task or {}).get("project")
        return str(project) if project else None

    def _scope(self) -> tuple[str, str | None]:
        scope = str(self.form.get("scope") or "SESSION")
        if scope == "TASK":
            return scope, self.page.route_task
        if scope == "PROJECT":
            return scope, self._project()
        return "SESSION", self.page.route_session

    async def import_block(self) -> None:
        text = str(self.form.get("text") or "").strip()
        problem = str(js.Function.new("text", STRICT_JSON)(text) or "") if text else "nothing was pasted"
        if problem:
            self._finish(error="That is not a settings block (" + problem + "). Nothing was imported.")
            return
        scope, scope_id = self._scope()
        self.form["busy"] = True
        self.page.render()
        try:
            data = await self.page.http.query(
                queries.IMPORT_RULES, {"settings": json.loads(text), "scope": scope, "scopeId": scope_id}
            )
        except net.GraphQLError as error:  # the server names each entry it could not read
            self._finish(error="Nothing was imported: " + str(error))
            return
        except Exception as error:  # noqa: BLE001 - the form shows whatever broke the send
            self._finish(error="Could not import: " + str(error))
            return
        count = len(data.get("importPermissionRules") or [])
        self.form["text"] = ""
        self._finish(done="Imported " + str(count) + (" rule." if count == 1 else " rules."))
        session_id = self.page.route_session
        if session_id:
            await self.load(session_id)

    async def export_block(self) -> None:
        scope, scope_id = self._scope()
        self.form["busy"] = True
        try:
            data = await self.page.http.query(queries.RULE_SETTINGS, {"scope": scope, "scopeId": scope_id})
            self.form["block"] = view.settings_text(data.get("permissionSettings") or {})
            self._finish()
        except Exception as error:  # noqa: BLE001 - the form shows whatever broke the read
            self._finish(error="Could not read the rules: " + str(error))

    def _finish(self, *, error: str | None = None, done: str | None = None) -> None:
        self.form["busy"] = False
        self.form["error"] = error
        self.form["done"] = done
        self.page.render()
