"""What an agent or a person sends through the GraphQL API comes back exactly, or is refused clearly.

Over a real server on SQLite and on PostgreSQL (the `server` fixture): question text (titles,
prompts, option labels and descriptions, context, custom answers) of any script, emoji, combining
marks, bidi text, quotes, backslashes, line breaks and padding; tool inputs and edited inputs (the
JSON scalar) of every JSON shape, number and key; and the numbers an ask takes (timeoutSeconds).
Each value is read back where its receiver reads it: the agent's subscription result, the
mutation's result and the queries. What the contract refuses (over a limit, NUL, a lone surrogate,
invalid UTF-8) is refused naming the field, and nothing of it is stored.

"Exactly" is strict: the reply is parsed with the standard library (exact integers, floats as
floats) and compared by type as well as value, with the sign of a zero, so 1e300 coming back as
a 301-digit integer or -0.0 coming back as 0.0 is a difference.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest

from tests.api.client import Client, GraphQLError
from tests.api.gql import running_session

# --- operations ---------------------------------------------------------------------------------

QUESTION_FIELDS = "questionId title prompt options { id label description }"
ASK_QUESTIONS = f"""subscription($s: ID!, $q: [ClarificationQuestionInput!]!, $c: String, $t: Float) {{
  askClarification(sessionId: $s, questions: $q, context: $c, timeoutSeconds: $t) {{
    __typename
    ... on ClarificationAsked {{ bundle {{ pendingId context questions {{ {QUESTION_FIELDS} }} }} }}
    ... on ClarificationAnswered {{ pendingId answers {{ questionId selectedOptionIds customText }} }}
    ... on ClarificationDetached {{ pendingId }}
  }} }}"""
CLARIFICATION = f"""query($p: ID!) {{ clarification(pendingId: $p) {{ context questions {{
  {QUESTION_FIELDS} status response {{ selectedOptionIds customText }} }} }} }}"""
ANSWER = """mutation($p: ID!, $a: [ClarificationAnswerInput!]!) {
  respondToClarification(pendingId: $p, answers: $a) { __typename
    ... on ClarificationResponded {
      bundle { questions { response { selectedOptionIds customText } } } } } }"""
MESSAGES = """query($s: ID!) { sessionMessages(sessionId: $s) { kind content
  clarification { title prompt options { label description } } } }"""
POST = """mutation($s: ID!, $c: String!) { postMessage(sessionId: $s, content: $c) { id content } }"""

ASK_PERMISSION = """subscription($s: ID!, $n: String!, $i: JSON!, $t: Float) {
  askPermission(sessionId: $s, toolName: $n, input: $i, timeoutSeconds: $t) {
    __typename
    ... on PermissionAsked { request { pendingId input } }
    ... on PermissionDecided { pendingId decision { behavior updatedInput message auto } }
    ... on PermissionDetached { pendingId }
  } }"""
PERMISSION = """query($p: ID!) { permission(pendingId: $p) { state input
  decision { behavior updatedInput message } } }"""
ALLOW = """mutation($p: ID!, $i: JSON, $r: Boolean!) {
  respondToPermission(pendingId: $p, behavior: ALLOW, updatedInput: $i, remember: $r) { __typename
    ... on PermissionResponded { request { input decision { behavior updatedInput } } } } }"""
ALLOW_UNEDITED = """mutation($p: ID!, $r: Boolean!) {
  respondToPermission(pendingId: $p, behavior: ALLOW, remember: $r) { __typename
    ... on PermissionResponded { request { decision { behavior updatedInput } } } } }"""
DENY = """mutation($p: ID!, $m: String) {
  respondToPermission(pendingId: $p, behavior: DENY, message: $m) { __typename
    ... on PermissionResponded { request { decision { behavior message } } } } }"""
RULES = "query($s: ID!) { permissionRules(sessionId: $s) { toolName input } }"

OPTION_IDS = ["q1_opt1", "q1_opt2"]


# --- exactness ----------------------------------------------------------------------------------


def differences(sent: Any, got: Any, path: str = "$") -> list[str]:
    """Where `got` differs from `sent`, by type, value and the sign of a zero (empty: exact)."""
    if type(sent) is not type(got):
        return [f"{path}: sent {sent!r:.80} ({type(sent).__name__}), got {got!r:.80} ({type(got).__name__})"]
    if isinstance(sent, float):
        same = sent == got and math.copysign(1.0, sent) == math.copysign(1.0, got)
        return [] if same else [f"{path}: sent {sent!r}, got {got!r}"]
    if isinstance(sent, dict):
        if sent.keys() != got.keys():
            return [f"{path}: keys sent {sorted(sent)!r:.200}, got {sorted(got)!r:.200}"]
        return [d for k in sent for d in differences(sent[k], got[k], f"{path}.{k}")]
    if isinstance(sent, list):
        if len(sent) != len(got):
            return [f"{path}: {len(sent)} items sent, {len(got)} got"]
        return [
            d
            for i, (s, g) in enumerate(zip(sent, got, strict=True))
            for d in differences(s, g, f"{path}[{i}]")
        ]
    return [] if sent == got else [f"{path}: sent {sent!r:.80}, got {got!r:.80}"]


def assert_exact(sent: Any, got: Any, where: str) -> None:
    found = differences(sent, got)
    assert not found, f"{where} differs from what was sent: {found[:5]}"


def assert_refused(err: pytest.ExceptionInfo[GraphQLError], field: str) -> None:
    assert err.value.codes == ["BAD_USER_INPUT"], err.value.errors
    message = err.value.errors[0]["message"]
    assert field in message.split(":")[0], f"the refusal does not name {field}: {message}"


async def post_raw(client: Client, body: bytes) -> httpx.Response:
    """A hand-written HTTP body (bytes a JSON library would not write), as a client could send."""
    return await client.http.post("/graphql", content=body, headers={"content-type": "application/json"})


# --- text ---------------------------------------------------------------------------------------

# (id, text, is a name): a name (question title, option label) holds no control character or line
# break (`domain.names`); free text (prompt, description, context, custom answer, message) may.
TEXTS: list[tuple[str, str, bool]] = [
    ("non-ascii", "Überprüfen: 検証 — «ready» ✓ ñ ß Ω", True),
    ("astral emoji", "🦄 👩\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 𝄞 👍🏽", True),
    ("combining marks", "e\u0301 a\u0308 n\u0303 \u1100\u1161\u11a8 Z\u0351\u0362\u0489", True),
    ("right-to-left", "\u202bשלום\u202c مرحبا بالعالم \u200fabc \u2067x\u2069", True),
    ("quotes and backslashes", '"dq" \'sq\' `bt` \\ C:\\temp\\new \\u0000 \\n \\" {"k": 1}', True),
    ("padding", "   padded at both ends   ", True),
    ("lines and tabs", "line 1\nline 2\r\n\tindented\r\rend\n\n", False),
    ("other controls", "bell\x07 esc\x1b[31mred\x1b[0m del\x7f nel\x85 vt\x0b ff\x0c \u2028 \u2029", False),
    ("invisible", "\ufeffbom \u200bzw \u00adsoft \u2060wj \u180e", True),
    ("noncharacters", "\ufdd0 \ufffe \uffff \U0001fffe \U0010ffff \U000e0001", True),
    ("sql and format", "'; DROP TABLE tasks; -- %s %(x)s {0} $1 ?", True),
]


def _question(text: str, is_name: bool) -> dict[str, Any]:
    plain = "plain"
    return {
        "title": text[:12] if is_name else plain,
        "prompt": text,
        "options": [
            {"label": text if is_name else plain, "description": text},
            {"label": "other", "description": None},
        ],
    }


@pytest.mark.parametrize(("text", "is_name"), [t[1:] for t in TEXTS], ids=[t[0] for t in TEXTS])
async def test_question_and_answer_text_comes_back_exactly_everywhere(
    admin: Client, text: str, is_name: bool
) -> None:
    _, session_id = await running_session(admin, title="text round trip")
    question = _question(text, is_name)
    expected_question = {
        "questionId": "q1",
        "title": question["title"],
        "prompt": text,
        "options": [
            {"id": OPTION_IDS[0], "label": question["options"][0]["label"], "description": text},
            {"id": OPTION_IDS[1], "label": "other", "description": None},
        ],
    }
    async with admin.subscribe(ASK_QUESTIONS, {"s": session_id, "q": [question], "c": text}) as agent:
        asked = (await agent.next())["askClarification"]
        assert asked["__typename"] == "ClarificationAsked", asked
        pending_id = asked["bundle"]["pendingId"]
        assert_exact(text, asked["bundle"]["context"], "the asked bundle's context")
        assert_exact([expected_question], asked["bundle"]["questions"], "the asked bundle's questions")

        answer = [{"questionId": "q1", "selectedOptionIds": [OPTION_IDS[0]], "customText": text}]
        responded = (await admin.execute(ANSWER, {"p": pending_id, "a": answer}))["respondToClarification"]
        assert responded["__typename"] == "ClarificationResponded", responded
        expected_response = {"selectedOptionIds": [OPTION_IDS[0]], "customText": text}
        assert_exact(expected_response, responded["bundle"]["questions"][0]["response"], "the respond result")

        answered = (await agent.next())["askClarification"]
        assert_exact(
            {
                "__typename": "ClarificationAnswered",
                "pendingId": pending_id,
                "answers": [{"questionId": "q1", **expected_response}],
            },
            answered,
            "the agent's answer",
        )

    read = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
    assert_exact(text, read["context"], "the queried context")
    assert_exact(
        [{**expected_question, "status": "ANSWERED", "response": expected_response}],
        read["questions"],
        "the queried questions",
    )
    posted = (await admin.execute(POST, {"s": session_id, "c": text}))["postMessage"]
    assert_exact(text, posted["content"], "the posted message")
    messages = (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"]
    assert_exact(
        [
            {
                "kind": "clarification_request",
                "content": text,
                "clarification": {
                    "title": question["title"],
                    "prompt": text,
                    "options": [
                        {"label": question["options"][0]["label"], "description": text},
                        {"label": "other", "description": None},
                    ],
                },
            },
            {"kind": "message", "content": text, "clarification": None},
        ],
        messages,
        "the session's messages",
    )


# Each bounded text at its documented limit (in characters: code points, so astral emoji that a
# UTF-16 client counts twice count once) and one over. (field as the refusal names it, limit).
LIMITS: list[tuple[str, int]] = [
    ("questions[0].title", 12),
    ("questions[0].prompt", 2_000),
    ("questions[0].options[0].label", 200),
    ("questions[0].options[0].description", 1_000),
    ("context", 4_000),
]


def _bounded_ask(field: str, value: str) -> tuple[dict[str, Any], str | None]:
    question: dict[str, Any] = {"prompt": "p", "options": [{"label": "a"}, {"label": "b"}]}
    context = None
    if field.endswith("title"):
        question["title"] = value
    elif field.endswith("prompt"):
        question["prompt"] = value
    elif field.endswith("label"):
        question["options"][0]["label"] = value
    elif field.endswith("description"):
        question["options"][0]["description"] = value
    else:
        context = value
    return question, context


@pytest.mark.parametrize(("field", "limit"), LIMITS, ids=[f for f, _ in LIMITS])
async def test_question_text_at_its_limit_comes_back_exactly_and_one_over_is_refused_storing_nothing(
    admin: Client, field: str, limit: int
) -> None:
    _, session_id = await running_session(admin, title="limits")
    over, context = _bounded_ask(field, "🦄" * (limit + 1))
    with pytest.raises(GraphQLError) as err:
        async with admin.subscribe(ASK_QUESTIONS, {"s": session_id, "q": [over], "c": context}) as agent:
            await agent.next()
    assert_refused(err, field)
    assert (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"] == []

    at, context = _bounded_ask(field, " é🦄" * (limit // 3) + "x" * (limit % 3))
    async with admin.subscribe(ASK_QUESTIONS, {"s": session_id, "q": [at], "c": context, "t": 5}) as agent:
        asked = (await agent.next())["askClarification"]
        assert asked["__typename"] == "ClarificationAsked", asked
        pending_id = asked["bundle"]["pendingId"]
    read = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
    got = read["questions"][0]
    assert_exact(at.get("title"), got["title"], "title")
    assert_exact(at["prompt"], got["prompt"], "prompt")
    assert_exact(at["options"][0]["label"], got["options"][0]["label"], "label")
    assert_exact(at["options"][0].get("description"), got["options"][0]["description"], "description")
    assert_exact(context, read["context"], "context")


async def test_a_custom_answer_at_its_limit_comes_back_exactly_and_one_over_is_refused_changing_nothing(
    admin: Client,
) -> None:
    _, session_id = await running_session(admin, title="custom text limit")
    question = {"prompt": "why?", "options": [{"label": "a"}, {"label": "b"}]}
    async with admin.subscribe(ASK_QUESTIONS, {"s": session_id, "q": [question]}) as agent:
        pending_id = (await agent.next())["askClarification"]["bundle"]["pendingId"]
        over = [{"questionId": "q1", "customText": "🦄" * 4_001}]
        with pytest.raises(GraphQLError) as err:
            await admin.execute(ANSWER, {"p": pending_id, "a": over})
        assert_refused(err, "answers[0].customText")
        read = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
        assert read["questions"][0]["status"] == "PENDING"
        assert read["questions"][0]["response"] is None

        text = "🦄\n" * 2_000
        at = [{"questionId": "q1", "customText": text}]
        assert (await admin.execute(ANSWER, {"p": pending_id, "a": at}))["respondToClarification"][
            "__typename"
        ] == "ClarificationResponded"
        answered = (await agent.next())["askClarification"]
        assert_exact(text, answered["answers"][0]["customText"], "the agent's custom answer")
    read = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
    assert_exact(text, read["questions"][0]["response"]["customText"], "the queried custom answer")


# --- text that cannot be stored -----------------------------------------------------------------

UNSTORABLE = {"nul": "a\x00b", "lone high surrogate": "a\ud800b", "lone low surrogate": "\udfff"}


@pytest.mark.parametrize("bad", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
async def test_an_answer_or_a_denial_with_unstorable_text_is_refused_and_changes_nothing(
    admin: Client, bad: str
) -> None:
    _, session_id = await running_session(admin, title="unstorable answer")
    question = {"prompt": "why?", "options": [{"label": "a"}, {"label": "b"}]}
    async with admin.subscribe(ASK_QUESTIONS, {"s": session_id, "q": [question], "t": 0.2}) as agent:
        pending_id = (await agent.next())["askClarification"]["bundle"]["pendingId"]
        assert (await agent.next())["askClarification"]["__typename"] == "ClarificationDetached"
    # The standard library writes a lone surrogate as its \\u escape, which is valid JSON text.
    answer = [{"questionId": "q1", "customText": bad}]
    body = json.dumps({"query": ANSWER, "variables": {"p": pending_id, "a": answer}}).encode()
    response = await post_raw(admin, body)
    assert response.status_code in (200, 400), response.text
    errors = response.json()["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], errors
    assert "customText" in errors[0]["message"], errors
    read = (await admin.execute(CLARIFICATION, {"p": pending_id}))["clarification"]
    assert read["questions"][0]["status"] == "PENDING"
    assert read["questions"][0]["response"] is None

    async with admin.subscribe(
        ASK_PERMISSION, {"s": session_id, "n": "Bash", "i": {"c": 1}, "t": 0.2}
    ) as agent:
        permission_id = (await agent.next())["askPermission"]["request"]["pendingId"]
        assert (await agent.next())["askPermission"]["__typename"] == "PermissionDetached"
    for variables in (
        {"query": DENY, "variables": {"p": permission_id, "m": bad}},
        {"query": ALLOW, "variables": {"p": permission_id, "i": {"c": bad}, "r": False}},
        {"query": ALLOW, "variables": {"p": permission_id, "i": {bad: 1}, "r": False}},
    ):
        response = await post_raw(admin, json.dumps(variables).encode())
        assert response.status_code in (200, 400), response.text
        errors = response.json()["errors"]
        assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], errors
    read = (await admin.execute(PERMISSION, {"p": permission_id}))["permission"]
    assert read == {"state": "ACTIVE_DETACHED", "input": {"c": 1}, "decision": None}


# Bodies that are not UTF-8: a stray byte, an overlong encoding, a cut sequence, an encoded
# surrogate (CESU-8); the last with a run of 19 digits, which the JSON reader takes another path for.
NOT_UTF8 = {
    "stray byte": b"\xff",
    "overlong": b"\xc0\xaf",
    "truncated": b"\xe2\x82",
    "encoded surrogate": b"\xed\xa0\x80",
    "stray byte and long digits": b"\xff 1234567890123456789",
}


@pytest.mark.parametrize("bad", list(NOT_UTF8.values()), ids=list(NOT_UTF8))
async def test_an_http_body_that_is_not_utf8_is_refused_as_a_bad_request_and_writes_nothing(
    admin: Client, bad: bytes
) -> None:
    task_query = "{ tasks { id title } }"
    before = await admin.execute(task_query)
    query = "mutation($t: String!) { createTask(title: $t) { id title } }"
    body = b'{"query": ' + json.dumps(query).encode() + b', "variables": {"t": "title ' + bad + b'"}}'
    response = await post_raw(admin, body)
    assert response.status_code in (200, 400), (response.status_code, response.text)
    errors = response.json()["errors"]
    assert [e["extensions"]["code"] for e in errors] in (["BAD_REQUEST"], ["BAD_USER_INPUT"]), errors
    assert await admin.execute(task_query) == before


# --- tool inputs (the JSON scalar) ----------------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = {"leaf": [1, "two", None]}
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]  # the outermost an object, as a tool's input is
    return value


INPUTS: dict[str, Any] = {
    "nested and empty": {
        "a": {"b": [1, [2, [3, {"c": None, "d": True, "e": False}]]]},
        "empty object": {},
        "empty array": [],
        "empty string": "",
        "empties": [[], {}, [{}], {"x": []}, [[]]],
    },
    "floats": {
        "tenth": 0.1,
        "third": 1 / 3,
        "tiny": 5e-324,
        "small": 1e-7,
        "whole": 100.0,
        "negative": -2.5,
        "below 1e16": 9007199254740993.0,
    },
    "large floats": {"1e16": 1e16, "1e300": 1e300, "-1e22": -1e22, "max": 1.7976931348623157e308},
    "negative zero": {"zero": -0.0, "list": [-0.0, 0.0]},
    "integers": {
        "zero": 0,
        "max int64": 2**63 - 1,
        "min int64": -(2**63),
        "max uint64": 2**64 - 1,
        "beyond 64 bits": 2**64 + 1,
        "huge": 10**40 + 7,
        "huge negative": -(10**30) - 1,
        "safe js": 2**53 + 1,
    },
    "keys": {
        "a.b": 1,
        "a.b.c": {"d.e": 2},
        "ключ": 3,
        "🔑": 4,
        "": 5,
        " spaced ": 6,
        "$ref": 7,
        "back\\slash": 8,
        'quo"te': 9,
        "1": 10,
        "e\u0301": "nfd",
        "é": "nfc",
        "__proto__": 11,
    },
    "strings": {
        "emoji": "🦄👩\u200d👩\u200d👧\u200d👦",
        "lines": "a\nb\r\n\tc",
        "controls": "\x1b[31m\x7f\x85\u2028",
        "quotes": "\"'`\\",
        "bidi": "\u202eevil\u202c",
    },
    "backslash-u0000 as text": {"command": "printf 'a\\u0000b' | xxd", "pattern": "\\u0000"},
    "nested 100 deep": _nested(100),
}


def _input_cases() -> list[Any]:
    return [pytest.param(value, id=name) for name, value in INPUTS.items()]


async def _ask_permission(admin: Client, session_id: str, tool_input: Any) -> str:
    async with admin.subscribe(
        ASK_PERMISSION, {"s": session_id, "n": "Tool", "i": tool_input, "t": 0.2}
    ) as agent:
        asked = (await agent.next())["askPermission"]
        assert asked["__typename"] == "PermissionAsked", asked
        assert_exact(tool_input, asked["request"]["input"], "the asked request's input")
        assert (await agent.next())["askPermission"]["__typename"] == "PermissionDetached"
    return str(asked["request"]["pendingId"])


class Receivers:
    """Every place a value is read back, checked before any assertion fails (so a failure lists them all)."""

    def __init__(self, sent: Any) -> None:
        self.sent = sent
        self.found: list[str] = []

    def check(self, got: Any, where: str) -> None:
        self.found += [f"{where}: {d}" for d in differences(self.sent, got)]

    def assert_exact(self) -> None:
        assert not self.found, "came back changed: " + "; ".join(self.found)


@pytest.mark.parametrize("tool_input", _input_cases())
async def test_a_tool_input_allowed_as_asked_reaches_the_agent_and_the_query_exactly(
    admin: Client, tool_input: Any
) -> None:
    _, session_id = await running_session(admin, title="tool input")
    seen = Receivers(tool_input)
    async with admin.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Tool", "i": tool_input}) as agent:
        asked = (await agent.next())["askPermission"]
        assert asked["__typename"] == "PermissionAsked", asked
        pending_id = asked["request"]["pendingId"]
        seen.check(asked["request"]["input"], "the asked request's input")
        seen.check(
            (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]["input"], "the query's input"
        )
        allowed = await admin.execute(ALLOW_UNEDITED, {"p": pending_id, "r": False})
        assert allowed["respondToPermission"]["__typename"] == "PermissionResponded", allowed
        seen.check(
            allowed["respondToPermission"]["request"]["decision"]["updatedInput"],
            "the respond result's updatedInput",
        )
        decided = (await agent.next())["askPermission"]
        assert decided["__typename"] == "PermissionDecided", decided
        seen.check(decided["decision"]["updatedInput"], "the agent's updatedInput")
    read = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
    seen.check(read["decision"]["updatedInput"], "the query's updatedInput")
    seen.assert_exact()


def _same_type_plain(value: Any) -> Any:
    """An input of the same JSON type as `value`, different from it (what the agent first asked)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return 1
    if isinstance(value, str):
        return "original"
    if isinstance(value, list):
        return ["original"]
    return {"original": True}


@pytest.mark.parametrize("edited", _input_cases())
async def test_an_edited_input_reaches_the_agent_and_the_query_exactly(admin: Client, edited: Any) -> None:
    _, session_id = await running_session(admin, title="edited input")
    seen = Receivers(edited)
    async with admin.subscribe(
        ASK_PERMISSION, {"s": session_id, "n": "Tool", "i": _same_type_plain(edited)}
    ) as agent:
        pending_id = (await agent.next())["askPermission"]["request"]["pendingId"]
        result = (await admin.execute(ALLOW, {"p": pending_id, "i": edited, "r": False}))[
            "respondToPermission"
        ]
        assert result["__typename"] == "PermissionResponded", result
        seen.check(result["request"]["decision"]["updatedInput"], "the respond result's updatedInput")
        decided = (await agent.next())["askPermission"]
        seen.check(decided["decision"]["updatedInput"], "the agent's updatedInput")
    read = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
    seen.check(read["decision"]["updatedInput"], "the query's updatedInput")
    seen.assert_exact()


# --- remembered inputs ----------------------------------------------------------------------------

REMEMBERED = {
    "plain": {"command": "make test", "timeout": 600, "ratio": 0.25},
    "large float and negative zero": {"command": "sleep", "deadline_ns": 1.7e18, "offset": -0.0},
}


@pytest.mark.parametrize("tool_input", list(REMEMBERED.values()), ids=list(REMEMBERED))
async def test_an_input_remembered_as_asked_allows_that_same_input_again(
    admin: Client, tool_input: Any
) -> None:
    _, session_id = await running_session(admin, title="remembered input")
    pending_id = await _ask_permission(admin, session_id, tool_input)
    allowed = (await admin.execute(ALLOW_UNEDITED, {"p": pending_id, "r": True}))["respondToPermission"]
    assert allowed["__typename"] == "PermissionResponded", allowed
    seen = Receivers(tool_input)
    rules = (await admin.execute(RULES, {"s": session_id}))["permissionRules"]
    assert [r["toolName"] for r in rules] == ["Tool"]
    seen.check(rules[0]["input"], "the rule's input")
    async with admin.subscribe(
        ASK_PERMISSION, {"s": session_id, "n": "Tool", "i": tool_input, "t": 5}
    ) as agent:
        again = (await agent.next())["askPermission"]
    if again["__typename"] != "PermissionDecided":
        seen.found.append(f"the same input asked again was not decided by the rule: {again['__typename']}")
    else:
        assert again["decision"]["auto"] is True
        seen.check(again["decision"]["updatedInput"], "the auto-decided updatedInput")
    seen.assert_exact()


@pytest.mark.parametrize("tool_input", list(REMEMBERED.values()), ids=list(REMEMBERED))
async def test_an_allow_sending_back_the_asked_input_may_be_remembered_for_it(
    admin: Client, tool_input: Any
) -> None:
    _, session_id = await running_session(admin, title="remembered as sent back")
    pending_id = await _ask_permission(admin, session_id, tool_input)
    result = (await admin.execute(ALLOW, {"p": pending_id, "i": tool_input, "r": True}))[
        "respondToPermission"
    ]
    assert result["__typename"] == "PermissionResponded", result
    assert_exact(
        tool_input, result["request"]["decision"]["updatedInput"], "the respond result's updatedInput"
    )


# --- raw JSON the standard encoders would not write -------------------------------------------------

# (raw JSON text of the edited input, what it must read as); duplicate keys: the last one wins,
# on both of the JSON reader's paths (a run of 19 digits takes the standard library's).
DUPLICATES = {
    "duplicate keys": ('{"a": 1, "a": 2, "b": {"c": 1, "c": [3]}}', {"a": 2, "b": {"c": [3]}}),
    "duplicate keys, long digits": (
        '{"a": 1, "a": 2, "id": "1234567890123456789"}',
        {"a": 2, "id": "1234567890123456789"},
    ),
}


async def _detached_permission(admin: Client, tool_input: Any) -> tuple[str, str]:
    _, session_id = await running_session(admin, title="raw input")
    return session_id, await _ask_permission(admin, session_id, tool_input)


def _allow_body(pending_id: str, raw_input: str) -> bytes:
    head = json.dumps({"query": ALLOW, "variables": {"p": pending_id, "r": False}})
    return (head[:-2] + ', "i": ' + raw_input + "}}").encode()


@pytest.mark.parametrize(("raw", "expected"), list(DUPLICATES.values()), ids=list(DUPLICATES))
async def test_duplicate_keys_in_an_edited_input_read_as_the_last_everywhere(
    admin: Client, raw: str, expected: dict[str, Any]
) -> None:
    _, pending_id = await _detached_permission(admin, {"a": 0})
    response = await post_raw(admin, _allow_body(pending_id, raw))
    assert response.status_code == 200, response.text
    result = response.json()["data"]["respondToPermission"]
    assert_exact(expected, result["request"]["decision"]["updatedInput"], "the respond result's updatedInput")
    read = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
    assert_exact(expected, read["decision"]["updatedInput"], "the query's updatedInput")


# Numbers JSON (ECMA-404) cannot hold as a float, and an integer longer than Python reads by default.
NON_FINITE = {
    "NaN": '{"x": NaN}',
    "Infinity": '{"x": Infinity}',
    "-Infinity": '{"x": [-Infinity]}',
    "1e400": '{"x": 1e400}',
}
INT_5000_DIGITS = "9" * 5_000


@pytest.mark.parametrize("raw", list(NON_FINITE.values()), ids=list(NON_FINITE))
async def test_a_non_finite_number_in_an_edited_input_is_refused_naming_it_and_changes_nothing(
    admin: Client, raw: str
) -> None:
    _, pending_id = await _detached_permission(admin, {"x": 1})
    response = await post_raw(admin, _allow_body(pending_id, raw))
    assert response.status_code in (200, 400), response.text
    errors = response.json()["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], errors
    assert errors[0]["message"].startswith("updatedInput:"), errors
    read = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
    assert read == {"state": "ACTIVE_DETACHED", "input": {"x": 1}, "decision": None}


async def test_an_integer_of_5000_digits_in_an_edited_input_comes_back_exactly_or_is_refused(
    admin: Client,
) -> None:
    _, pending_id = await _detached_permission(admin, {"x": 1})
    response = await post_raw(admin, _allow_body(pending_id, '{"x": ' + INT_5000_DIGITS + "}"))
    assert response.status_code in (200, 400), (response.status_code, response.text[:200])
    body = response.json()
    if "errors" in body:
        # More digits than the interpreter converts: a body this server cannot read (BAD_REQUEST).
        codes = [e["extensions"]["code"] for e in body["errors"]]
        assert codes in (["BAD_USER_INPUT"], ["BAD_REQUEST"]), body["errors"]
        read = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
        assert read["decision"] is None
    else:
        got = body["data"]["respondToPermission"]["request"]["decision"]["updatedInput"]["x"]
        assert str(got) == INT_5000_DIGITS


# Nesting: variables nest at most 256 levels deep (backend/api/hygiene.py MAX_DEPTH); deeper is
# refused naming where, and a body nested past what the JSON reader takes is a bad request.
DEPTHS = [200, 400, 1_000, 5_000]


def _deep_raw(depth: int) -> str:
    return '{"k": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deeply_nested_edited_input_comes_back_exactly_or_is_refused_naming_it(
    admin: Client, depth: int
) -> None:
    _, pending_id = await _detached_permission(admin, {"k": 0})
    response = await post_raw(admin, _allow_body(pending_id, _deep_raw(depth)))
    assert response.status_code in (200, 400), (response.status_code, response.text[:300])
    compact = _deep_raw(depth).replace(" ", "")
    if '"errors"' in response.text:
        errors = response.json()["errors"]
        codes = [(e.get("extensions") or {}).get("code") for e in errors]
        if codes == ["BAD_USER_INPUT"]:  # deeper than the variables may nest: names the variable
            assert errors[0]["message"].startswith("$.i."), errors
            assert "must not nest more than 256 levels deep" in errors[0]["message"], errors
        else:  # deeper than the JSON reader takes: the body is not read at all
            assert codes == ["BAD_REQUEST"], errors
        read = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
        assert read["decision"] is None
        return
    # Compared as text: the standard library cannot read the deepest of these back.
    assert compact in response.text
    query = await admin.http.post("/graphql", json={"query": PERMISSION, "variables": {"p": pending_id}})
    assert compact in query.text


# --- numbers the schema takes -----------------------------------------------------------------------

# timeoutSeconds: more than 0; larger than the server's longest wait is capped (documented).
BAD_TIMEOUTS: dict[str, Any] = {
    "zero": 0,
    "negative zero": -0.0,
    "negative": -1,
    "tiny negative": -5e-324,
    "NaN string": "NaN",
    "number string": "5",
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "beyond a float": 10**400,
    "integer a float cannot hold exactly": 10**30,
    "boolean": True,
    "object": {"seconds": 5},
}


@pytest.mark.parametrize("seconds", list(BAD_TIMEOUTS.values()), ids=list(BAD_TIMEOUTS))
async def test_a_bad_timeout_is_refused_naming_it_and_nothing_is_asked(admin: Client, seconds: Any) -> None:
    _, session_id = await running_session(admin, title="bad timeout")
    variables = {"s": session_id, "n": "Tool", "i": {"c": 1}, "t": seconds}
    with pytest.raises(GraphQLError) as err:
        async with admin.subscribe(ASK_PERMISSION, variables) as agent:
            await agent.next()
    message = err.value.errors[0]["message"]
    assert "timeoutSeconds" in message or "$t" in message, err.value.errors
    assert err.value.codes == ["BAD_USER_INPUT"], err.value.errors
    assert (await admin.execute(MESSAGES, {"s": session_id}))["sessionMessages"] == []


@pytest.mark.parametrize("seconds", [1e-300, 1e308, 7_201], ids=["tiny", "1e308", "just over the longest"])
async def test_a_timeout_beyond_the_longest_wait_is_capped_and_a_tiny_one_taken(
    admin: Client, seconds: float
) -> None:
    _, session_id = await running_session(admin, title="timeout extremes")
    question = {"prompt": "p", "options": [{"label": "a"}, {"label": "b"}]}
    async with admin.subscribe(ASK_QUESTIONS, {"s": session_id, "q": [question], "t": seconds}) as agent:
        asked = (await agent.next())["askClarification"]
        assert asked["__typename"] == "ClarificationAsked", asked
        if seconds < 1:
            assert (await agent.next())["askClarification"]["__typename"] == "ClarificationDetached"
        else:
            with pytest.raises(TimeoutError):
                await agent.next(timeout=0.3)  # still waiting: capped, not expired or overflowed


PAGE = "query($s: ID!, $f: Int) { sessionMessages(sessionId: $s, first: $f) { id } }"


@pytest.mark.parametrize("first", [0, -1, 501, 2**31, 2**53, 1.5, "10"])
async def test_a_bad_page_size_is_refused_naming_it(admin: Client, first: Any) -> None:
    _, session_id = await running_session(admin, title="page size")
    with pytest.raises(GraphQLError) as err:
        await admin.execute(PAGE, {"s": session_id, "f": first})
    message = err.value.errors[0]["message"]
    assert message.startswith("first:") or "$f" in message, err.value.errors


# --- a denial's reason ------------------------------------------------------------------------------

DENIALS = [
    "astral emoji",
    "quotes and backslashes",
    "right-to-left",
    "padding",
    "lines and tabs",
    "other controls",
]


@pytest.mark.parametrize(
    "text",
    [pytest.param(text, id=name) for name, text, _ in TEXTS if name in DENIALS],
)
async def test_a_denial_reason_reaches_the_agent_and_the_query_exactly(admin: Client, text: str) -> None:
    _, session_id = await running_session(admin, title="denial reason")
    seen = Receivers(text.strip())  # trimmed at both ends, as the schema says; nothing else changes
    async with admin.subscribe(ASK_PERMISSION, {"s": session_id, "n": "Tool", "i": {"c": 1}}) as agent:
        pending_id = (await agent.next())["askPermission"]["request"]["pendingId"]
        denied = (await admin.execute(DENY, {"p": pending_id, "m": text}))["respondToPermission"]
        assert denied["__typename"] == "PermissionResponded", denied
        seen.check(denied["request"]["decision"]["message"], "the respond result's message")
        decided = (await agent.next())["askPermission"]
        assert decided["decision"]["behavior"] == "DENY", decided
        seen.check(decided["decision"]["message"], "the agent's message")
    read = (await admin.execute(PERMISSION, {"p": pending_id}))["permission"]
    seen.check(read["decision"]["message"], "the query's message")
    seen.assert_exact()
