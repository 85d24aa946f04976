"""The permission card: a tool call to allow, deny, edit then allow, or always allow in its session."""

import js  # type: ignore[import-not-found]

from frontend_py.app import net, queries
from frontend_py.app.cards import PERMISSION, Card, Holder
from frontend_py.app.page import REFUSED, Page, attr, spawn
from frontend_py.app.rules import Rules
from frontend_py.app.sync import Sync
from frontend_py.app.views import permission as view
from frontend_py.app.views import tools
from frontend_py.kit import PERMISSION as PERMISSION_ACTION

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

LIVE_REQUEST_STATES = ("ACTIVE_LIVE", "ACTIVE_DETACHED")
# Returns "" when the text is strict JSON, else the browser's reason (a thrown error never reaches
# MicroPython as a Python exception; MicroPython's own json.loads also takes trailing commas).
STRICT_JSON = "try { JSON.parse(text); return ''; } catch (error) { return String(error.message || error); }"


def live_request(
    permissions: dict[str, dict[str, Any]], resolved: set[str], session_id: str, action: str | None
) -> dict[str, Any] | None:
    """The session's permission request while its projection says PERMISSION and it is undecided."""
    if action != PERMISSION_ACTION:
        return None
    request = permissions.get(session_id)
    if request is None or request.get("pendingId") in resolved:
        return None
    if request.get("sessionId", session_id) != session_id:
        return None
    if request.get("state") not in LIVE_REQUEST_STATES:
        return None
    return request


def closed_reason(request: dict[str, Any] | None) -> str | None:
    """Why a request's card closed without a decision from this page; None while it still waits."""
    state = (request or {}).get("state")
    decided = (request or {}).get("decision")
    if state in LIVE_REQUEST_STATES and not decided:
        return None  # still waiting (a question outranks it for now): nothing to say
    if decided:
        return "ELSEWHERE"
    if state == "SUPERSEDED_HISTORY":
        return "SUPERSEDED"
    return "CLOSED"


def _strict_json_error(text: str) -> str:
    check = js.Function.new("text", STRICT_JSON)
    return str(check(text) or "")


class PermissionCard(Card):
    """The draft: ``reason`` (for a deny), ``editing`` with ``edited`` (the input's text), the rule
    to remember: ``choice`` (which suggestion), ``scope``, ``confirming`` (the warning of a broad
    rule is up)."""

    kind = PERMISSION

    def __init__(
        self,
        page: Page,
        sync: Sync,
        holder: Holder,
        pending_id: str,
        rules: Rules,
        decided_here: set[str],
        where: tuple[str | None, str | None] | None = None,
    ) -> None:
        super().__init__(page, sync, holder, pending_id, where)
        self.rules = rules
        # Requests decided on this page: when one closes on its decision's own event, that close is
        # not "decided elsewhere". Shared by every permission card of the page.
        self.decided_here = decided_here
        self.draft: dict[str, Any] = {}

    def request(self) -> dict[str, Any] | None:
        """The request this card is for, while it is the session's one."""
        if self.session_id is None:
            return None
        request = self.sync.permissions.get(self.session_id)
        if request is None or request.get("pendingId") != self.pending_id:
            return None
        return request

    def _drawn(self) -> dict[str, Any] | None:
        """The request to draw, the draft knowing whether its task has a project (a project scope is
        offered only where there is one)."""
        request = self.request()
        task = self.page.store.task(self.task_id) if self.task_id else None
        self.draft["project"] = (task or {}).get("project")
        return request

    def html(self) -> str:
        request = self._drawn()
        return "" if request is None else view.card(request, self.draft, self.busy, self.error)

    def body(self, ns: str, detached_note: bool = True) -> str:
        request = self._drawn()
        if request is None:
            return ""
        return view.body(request, self.draft, self.busy, self.error, ns, detached_note)

    def buttons(self) -> str:
        return view.buttons(bool(self.draft.get("editing")), self.busy)

    def write(self, box: Any) -> None:
        test_id = attr(box, "data-testid")
        if test_id == "permission-reason":
            self.draft["reason"] = str(box.value)
        elif test_id == "permission-edited-input":
            self.draft["edited"] = str(box.value)

    def edit(self) -> None:
        request = self.request()
        if request is None:
            return
        self.draft["editing"] = True
        if self.draft.get("edited") is None:
            self.draft["edited"] = tools.pretty_json(request.get("input"))
        self.error = None
        self.holder.focus("permission-edited-input|")
        self.page.render()

    def cancel_edit(self) -> None:
        self.draft["editing"] = False
        self.error = None
        self.holder.focus("permission-edit|")
        self.page.render()

    def choose(self, index: int) -> None:
        """Remember this suggestion (and ask again before one that lets any input through)."""
        self.draft["choice"] = index
        self.draft["confirming"] = False
        self.page.render()

    def open_remember(self) -> None:
        """Show the rules to remember (an inbox item keeps them behind one button until then)."""
        self.draft["remembering"] = True
        self.holder.focus("permission-suggestion-0|")
        self.page.render()

    def scope(self, value: str) -> None:
        self.draft["scope"] = value
        self.draft["confirming"] = False
        self.page.render()

    def cancel_broad(self) -> None:
        self.draft["confirming"] = False
        self.holder.focus("permission-suggestion-" + str(self.draft.get("choice") or 0) + "|")
        self.page.render()

    def _asks_once_more(self, request: dict[str, Any], confirmed: bool) -> bool:
        """A rule that lets any input of the tool through is remembered only once the warning was
        read: the first "Always allow" shows it (and takes the focus), its own button sends."""
        picked = view.chosen(request, self.draft)
        if confirmed or picked is None or not picked.get("broad"):
            return False
        self.draft["confirming"] = True
        self.holder.focus("permission-broad-confirm|")
        self.page.render()
        return True

    def _variables(self, action: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """The decision ``action`` sends; None (with the card's error set) when the edited input is
        refused before anything is sent."""
        picked = view.chosen(request, self.draft) if action == "perm-always" else None
        variables: dict[str, Any] = {
            "pendingId": self.pending_id,
            "behavior": "DENY" if action == "perm-deny" else "ALLOW",
            "updatedInput": None,
            "message": None,
            "remember": action == "perm-always",
            "rememberAnyInput": False,
            "rememberPattern": None if picked is None else picked.get("pattern"),
            "rememberScope": str(self.draft.get("scope") or "SESSION")
            if action == "perm-always"
            else "SESSION",
        }
        if action == "perm-deny":
            variables["message"] = (self.draft.get("reason") or "").strip() or None
        elif action == "perm-allow-edited":
            text = str(self.draft.get("edited") or "")
            problem = _strict_json_error(text) if text.strip() else ""
            value: Any = None
            error: str | None = None
            if problem:
                error = "That is not valid JSON (" + problem + "). Nothing was sent."
            else:
                value, error = tools.check_edited(text, request.get("input"))
                if error is not None:
                    error += " Nothing was sent."
            if error is not None:
                self.error = error
                self.holder.focus("permission-edited-input|")
                self.page.render()
                return None
            variables["updatedInput"] = value
        return variables

    async def decide(self, action: str, confirmed: bool = False) -> None:
        """Allow, deny, allow edited or always allow (a broad rule once confirmed); the session (and
        its rules) are read again."""
        request = self.request()
        session_id, task_id = self.session_id, self.task_id
        if request is None or session_id is None or task_id is None or self.busy:
            return
        if action == "perm-always" and self._asks_once_more(request, confirmed):
            return
        pending_id = self.pending_id
        variables = self._variables(action, request)
        if variables is None:
            return
        self.busy = True
        self.error = None
        # The card may close on this decision's own event before the response arrives: that close
        # is not "decided elsewhere".
        self.decided_here.add(pending_id)
        self.page.render()
        try:
            data = await self.page.http.query(queries.RESPOND_PERMISSION, variables)
            self._apply(data["respondToPermission"])
        except net.Unauthorized:
            self.page.sign_out(REFUSED)
            return
        except net.GraphQLError as error:
            # INVALID_INPUT names the field; nothing was written, so the card stays as it was.
            self.decided_here.discard(pending_id)
            self.error = "Not sent: " + str(error)
        except Exception as error:  # noqa: BLE001 - the card shows whatever broke the send
            self.decided_here.discard(pending_id)
            self.error = "Could not send the decision: " + str(error)
        self.busy = False
        self.page.render()
        self.refresh()
        if variables["remember"]:
            spawn(self.rules.load(session_id))

    def _apply(self, result: dict[str, Any]) -> None:
        kind = result.get("__typename")
        pending_id = self.pending_id
        if kind == "PermissionResponded":
            self.holder.closed(pending_id, ("QUEUED", None, PERMISSION) if result.get("queued") else None)
        elif kind == "ClarificationConflict":
            self.holder.closed(pending_id, (result.get("reason"), None, PERMISSION))
            self.holder.explain(pending_id, result.get("reason"))
        elif kind == "ClarificationDeliveryFailed":
            message = str(result.get("message") or "the agent could not be reached")
            if result.get("retryable"):
                self.decided_here.discard(pending_id)
                self.error = "Not delivered: " + message + ". Your decision was kept; try again."
            else:
                self.holder.closed(pending_id, ("FAILED", None, PERMISSION))
                self.error = None
