"""A claim as a hand-off carries it to the agent's process over the bus: what the other side reads
back is the claim that was sent, for a question's answers and for a permission request's decision."""

from __future__ import annotations

import json

import pytest

from backend.domain.lifecycle import Answer, Claim
from backend.domain.permissions import ALLOW, DENY, Decision, RuleRef
from backend.services.waiters import claim_from_json, claim_to_json


def claim(*answers: Answer | Decision, rejected: bool = False) -> Claim:
    return Claim("c1", "p1", "s1", "t1", "u1", ("m1", "m2"), answers, rejected)


@pytest.mark.parametrize(
    "sent",
    [
        claim(Answer("q1", ("q1_opt2",), None), Answer("q2", (), "in my own words")),
        claim(Answer("q1", (), None), rejected=True),
        claim(Decision(ALLOW, updated_input={"command": "ls", "n": [1, None]}, remember=True)),
        claim(Decision(DENY, message="not on a Friday")),
        claim(Decision(ALLOW, updated_input=None, auto=True, rule=RuleRef("r1", "Bash", any_input=False))),
    ],
)
def test_a_claim_reads_back_as_it_was_sent(sent: Claim) -> None:
    over_the_bus = json.loads(json.dumps(claim_to_json(sent)))
    assert claim_from_json(over_the_bus) == sent


def test_an_unreadable_decision_is_refused() -> None:
    data = claim_to_json(claim(Decision(ALLOW)))
    data["answers"] = [{"decision": {"behavior": "maybe"}}]
    with pytest.raises(ValueError, match="unreadable decision"):
        claim_from_json(data)
