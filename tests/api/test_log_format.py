"""Every line a real server writes to standard error is in the log's format, whatever a client sends
(uvicorn's and the libraries' lines included), and a refused channel URL shows in it only masked."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import httpx
import pytest

from backend.domain.names import CONTROL
from backend.logs import CONTINUATION
from tests.api.client import Client, GraphQLError
from tests.dialects import served
from tests.servers import Server

# `backend.logs.FORMAT`: time, level, logger, message; or a continuation line of a traceback.
LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+ \S")
ADD_CHANNEL = "mutation($u: String!) { addNotificationChannel(url: $u) { id } }"


def written(server: Server, start: int = 0) -> str:
    """What the server wrote to standard error from byte `start` on."""
    with server.log_path.open("rb") as log:
        log.seek(start)
        return log.read().decode(errors="replace")


def until_written(server: Server, start: int, text: str) -> str:
    """The log from `start` once `text` is in it (the server writes it while answering)."""
    deadline = time.monotonic() + 30
    while text not in (found := written(server, start)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def out_of_format(log: str) -> list[str]:
    return [
        line
        for line in log.splitlines()
        if not (LINE.match(line) or line.startswith(CONTINUATION)) or CONTROL.search(line)
    ]


async def test_a_raw_garbage_request_leaves_only_lines_in_the_log_format(server: Server) -> None:
    start = server.log_path.stat().st_size

    def send_garbage() -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            raw.sendall(b"GARBAGE\r\n\r\n")
            return raw.recv(1000)

    assert (await asyncio.to_thread(send_garbage)).startswith(b"HTTP/1.1 400")
    log = await asyncio.to_thread(until_written, server, start, "Invalid HTTP request received.")
    assert re.search(r" WARNING uvicorn\.error Invalid HTTP request received\.$", log, re.MULTILINE), log
    # Not only the lines of this request: all the server wrote since it started.
    assert out_of_format(written(server)) == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("slak://TokenA/TokenB/SECRETTOKENC", "is not an Apprise URL this server can send to (slak://***"),
        ("slack://TokenA/TokenB", "is a slack:// URL, but incomplete"),
    ],
    ids=["mistyped scheme", "incomplete"],
)
async def test_a_refused_channel_url_is_one_info_line_that_shows_nothing_past_its_scheme(
    admin: Client, server: Server, url: str, says: str
) -> None:
    start = server.log_path.stat().st_size
    with pytest.raises(GraphQLError) as refused:
        await admin.execute(ADD_CHANNEL, {"u": url})
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert says in str(refused.value)
    log = await asyncio.to_thread(until_written, server, start, "path=addNotificationChannel")
    (line,) = [line for line in log.splitlines() if "addNotificationChannel" in line]
    assert " INFO turnwise.api client error " in line
    assert says in line
    for part in ("TokenA", "TokenB", "SECRETTOKENC"):
        assert part not in log
    assert [line for line in log.splitlines() if " ERROR " in line] == []


def test_with_the_access_log_on_each_request_is_one_line_in_the_log_format() -> None:
    with served("sqlite", env={"TURNWISE_ACCESS_LOG": "1"}) as server:
        assert httpx.get(f"{server.base_url}/readyz?probe=1", timeout=10).status_code == 200
        log = until_written(server, 0, "/readyz?probe=1")
    (line,) = [line for line in log.splitlines() if "/readyz?probe=1" in line]
    assert re.search(r' INFO uvicorn\.access 127\.0\.0\.1:\d+ - "GET /readyz\?probe=1 HTTP/1\.1" 200$', line)
    assert out_of_format(log) == []
