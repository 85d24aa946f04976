"""Text that cannot be stored faithfully is refused up front, over HTTP and WebSocket alike."""

from __future__ import annotations

import pytest

from tests.api.client import Client, GraphQLError
from tests.api.test_clarification_api import ASK
from tests.api.test_foundation_api import MESSAGES, new_session


@pytest.mark.parametrize("bad", ["a\x00b", "x\ud800y"], ids=["nul", "lone surrogate"])
async def test_an_agent_question_with_unstorable_text_is_refused_naming_the_field(
    admin: Client, bad: str
) -> None:
    _, session_id = await new_session(admin)
    question = {"prompt": bad, "options": [{"label": "a"}, {"label": "b"}]}
    with pytest.raises(GraphQLError) as err:
        async with admin.subscribe(ASK, {"s": session_id, "q": [question], "t": 1}) as sub:
            await sub.next()
    assert err.value.codes == ["BAD_USER_INPUT"]
    assert err.value.errors[0]["message"].startswith("$.q[0].prompt: ")
    assert (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"] == []
