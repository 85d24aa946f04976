"""The question card: a bundle's questions, the person's choices and own answers, Submit and Skip."""

from frontend_py.app import net, queries
from frontend_py.app.cards import QUESTION, Card, Holder
from frontend_py.app.page import REFUSED, Page, attr, js_none
from frontend_py.app.sync import Sync
from frontend_py.app.views import question as view
from frontend_py.kit import Store

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


def find(
    store: Store, bundles: dict[str, dict[str, Any]], session_id: str | None, pending_id: str | None
) -> list[dict[str, Any]]:
    """The questions of bundle ``pending_id`` in the session's messages, else as a load named them."""
    if session_id is None or pending_id is None:
        return []
    found = []
    for message in store.messages(session_id):
        question = message.get("clarification")
        if isinstance(question, dict) and question.get("pendingId") == pending_id:
            found.append(question)
    if not found:
        # The session's messages are still loading: the forced load already named the bundle.
        bundle = bundles.get(pending_id) or {}
        if bundle.get("sessionId", session_id) == session_id:
            found = list(bundle.get("questions") or [])
    return found


class QuestionCard(Card):
    """The draft (chosen options and own answers per question) belongs to this one bundle."""

    kind = QUESTION

    def __init__(
        self,
        page: Page,
        sync: Sync,
        holder: Holder,
        pending_id: str,
        where: tuple[str | None, str | None] | None = None,
    ) -> None:
        super().__init__(page, sync, holder, pending_id, where)
        self.selections: dict[str, list[str]] = {}
        self.custom: dict[str, str] = {}

    def questions(self) -> list[dict[str, Any]]:
        return find(self.page.store, self.sync.bundles, self.session_id, self.pending_id)

    def context(self) -> str | None:
        context = (self.sync.bundles.get(self.pending_id) or {}).get("context")
        return None if context is None else str(context)

    def html(self) -> str:
        return view.card(
            self.pending_id,
            self.questions(),
            self.context(),
            self.selections,
            self.custom,
            self.busy,
            self.error,
        )

    def body(self, ns: str, detached_note: bool = True) -> str:
        return view.body(
            self.questions(), self.context(), self.selections, self.custom, self.error, ns, detached_note
        )

    def buttons(self) -> str:
        return view.buttons(self.busy)

    def write(self, box: Any) -> None:
        question_id = attr(box, "data-question-id")
        if question_id is not None:
            self.custom[question_id] = str(box.value)

    def toggle(self, question_id: str, option_id: str) -> None:
        """A click on an option: in "choose any" it flips; in "choose one" it is chosen, or cleared."""
        question = None
        for candidate in self.questions():
            if candidate.get("questionId") == question_id:
                question = candidate
        if question is None:
            return
        chosen = list(self.selections.get(question_id) or [])
        if question.get("multiSelect"):
            if option_id in chosen:
                chosen.remove(option_id)
            else:
                chosen.append(option_id)
        else:
            chosen = [] if chosen == [option_id] else [option_id]
        self.selections[question_id] = chosen
        self.error = None
        self.page.render()

    def move(self, radio: Any, step: int) -> None:
        """Arrow keys in a "choose one" group: the next (or previous) option is chosen and focused."""
        group = radio.closest("[role=radiogroup]")
        if js_none(group):
            return
        radios = group.querySelectorAll("[role=radio]")
        count = int(radios.length)
        current = attr(radio, "data-option-id")
        index = 0
        for position in range(count):
            if attr(radios.item(position), "data-option-id") == current:
                index = position
        chosen = radios.item((index + step) % count)
        question_id = attr(chosen, "data-question-id") or ""
        option_id = attr(chosen, "data-option-id") or ""
        self.selections[question_id] = [option_id]
        self.error = None
        self.holder.focus("clarification-option-" + option_id + "|" + question_id)
        self.page.render()

    def _answers(self) -> list[dict[str, Any]]:
        answers = []
        for question in self.questions():
            question_id = str(question.get("questionId"))
            text = (self.custom.get(question_id) or "").strip()
            chosen = self.selections.get(question_id) or []
            if chosen or text:
                answers.append(
                    {"questionId": question_id, "selectedOptionIds": chosen, "customText": text or None}
                )
        return answers

    async def respond(self, rejected: bool) -> None:
        """Submit the draft (or Skip: reject the bundle); the session is read again either way."""
        pending_id = self.pending_id
        if self.session_id is None or self.task_id is None or self.busy:
            return
        answers = [] if rejected else self._answers()
        if not rejected and not answers:
            self.error = "Choose an option or write an answer first."
            self.page.render()
            return
        self.busy = True
        self.error = None
        self.page.render()
        variables = {"pendingId": pending_id, "answers": answers, "rejected": rejected}
        try:
            data = await self.page.http.query(queries.RESPOND, variables)
            self._apply(data["respondToClarification"])
        except net.Unauthorized:
            self.page.sign_out(REFUSED)
            return
        except Exception as error:  # noqa: BLE001 - the card shows whatever broke the send
            self.error = "Could not send the answer: " + str(error)
        self.busy = False
        self.page.render()
        self.refresh()

    def _apply(self, result: dict[str, Any]) -> None:
        kind = result.get("__typename")
        if kind == "ClarificationResponded":
            # A responded bundle is terminal: it can never become active again, so the card stays
            # closed even before the session's events catch up.
            self.holder.closed(self.pending_id, ("QUEUED", None, QUESTION) if result.get("queued") else None)
        elif kind == "ClarificationConflict":
            self.holder.closed(self.pending_id, (result.get("reason"), result.get("winner"), QUESTION))
        elif kind == "ClarificationDeliveryFailed":
            message = str(result.get("message") or "the agent could not be reached")
            if result.get("retryable"):
                self.error = "Not delivered: " + message + ". Your answer was kept; try again."
            else:
                self.holder.closed(self.pending_id, ("FAILED", None, QUESTION))
                self.error = None
