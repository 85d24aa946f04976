"""GraphiQL for support staff works with no outside network: local pinned assets and a token field."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.client import Client
from tests.api.gql import running_session, token_for
from tests.servers import ADMIN_TOKEN, Server, fresh_database


@pytest.fixture(scope="module")
def graphiql_server() -> Iterator[Server]:
    srv = Server(fresh_database("sqlite")).start()
    try:
        yield srv
    finally:
        srv.stop()


def ide_html(srv: Server) -> str:
    response = httpx.get(f"{srv.base_url}/graphql", headers={"Accept": "text/html"})
    assert response.status_code == 200
    return response.text


def test_graphiql_page_references_no_external_host_and_its_assets_are_served(graphiql_server: Server) -> None:
    html = ide_html(graphiql_server)
    assert "GraphiQL" in html
    assert 'data-testid="graphiql-token"' in html
    assert not re.search(r"""(src|href)=["'](https?:)?//""", html), (
        "the page loads something from another host"
    )
    assert "unpkg.com" not in html
    assert "cdn" not in html.lower()
    assets = re.findall(r"""(?:src|href)="(/vendor/[^"]+)\"""", html)
    assert len(assets) == 7
    for path in assets:
        assert httpx.get(graphiql_server.base_url + path).status_code == 200, path


async def _support_token_and_task(srv: Server) -> tuple[str, str]:
    admin = Client(srv.base_url, ADMIN_TOKEN)
    try:
        _, token = await token_for(admin, "support", name="support-staff")
        await running_session(admin, title="visible-to-support")
        return token, "visible-to-support"
    finally:
        await admin.aclose()


@pytest.mark.browser
async def test_support_staff_run_a_query_with_a_token_in_graphiql_offline(
    graphiql_server: Server, page: Any
) -> None:
    token, title = await _support_token_and_task(graphiql_server)
    outside: list[str] = []

    async def only_local(route: Any) -> None:
        host = urlsplit(route.request.url).hostname
        if host in ("127.0.0.1", "localhost"):
            await route.continue_()
        else:
            outside.append(route.request.url)
            await route.abort()

    await page.route("**/*", only_local)
    await page.goto(f"{graphiql_server.base_url}/graphql")
    await page.get_by_test_id("graphiql-token").fill(token)
    await page.locator(".graphiql-execute-button").click()
    result = page.locator(".graphiql-response")
    await result.get_by_text(title).wait_for(timeout=15000)
    assert '"tasks"' in await result.inner_text()
    assert outside == []
    # The token is remembered for the next visit.
    await page.reload()
    assert await page.get_by_test_id("graphiql-token").input_value() == token
