"""A task knows its project: the repository folder its agents work in (turn 4)."""

from __future__ import annotations

import pytest

from tests.api.client import Client, GraphQLError
from tests.api.test_text_hygiene import CONTROLS

CREATE = "mutation($t: String!, $p: String) { createTask(title: $t, project: $p) { id project } }"
TASK = "query($id: ID!) { task(id: $id) { title project } }"
TASKS = "{ tasks { id project } }"


async def test_a_task_created_with_a_project_reads_it_back_and_one_without_has_none(
    admin: Client,
) -> None:
    made = (await admin.execute(CREATE, {"t": "fix it", "p": "/home/ann/src/shop"}))["createTask"]
    plain = (await admin.execute(CREATE, {"t": "plain", "p": None}))["createTask"]
    assert made["project"] == "/home/ann/src/shop"
    assert plain["project"] is None
    assert (await admin.execute(TASK, {"id": made["id"]}))["task"] == {
        "title": "fix it",
        "project": "/home/ann/src/shop",
    }
    listed = {t["id"]: t["project"] for t in (await admin.execute(TASKS))["tasks"]}
    assert listed[made["id"]] == "/home/ann/src/shop"
    assert listed[plain["id"]] is None


@pytest.mark.parametrize(
    "project", ["/src/a\nb", "/src/a\x1bb", "   ", "/" + "x" * 1000], ids=["lf", "esc", "blank", "long"]
)
async def test_a_project_that_cannot_be_a_folder_name_is_refused_and_no_task_is_made(
    admin: Client, project: str
) -> None:
    before = await admin.execute(TASKS)
    with pytest.raises(GraphQLError) as err:
        await admin.execute(CREATE, {"t": "a task", "p": project})
    assert err.value.codes == ["BAD_USER_INPUT"]
    message = err.value.errors[0]["message"]
    assert message.startswith("project: ")
    assert not any(c in message for c in CONTROLS.values())
    assert await admin.execute(TASKS) == before
