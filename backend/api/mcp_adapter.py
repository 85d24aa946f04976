"""Every undocumented name of the MCP SDK (`mcp`) that the MCP endpoint relies on: here, and nowhere else.

Checked against (`CHECKED`): mcp 2.3.0 (with its types package, mcp-types 2.3.0). The canary
(`tests/api/test_mcp_adapter.py`) checks that each name of `RELIED_ON` still exists with the shape
used here, and fails while an installed version differs from `CHECKED`, naming what to re-check.
`TURNWISE_MCP_ADAPTER=0` (`Settings.mcp_adapter`) turns off what the adapter changes: the endpoint
then refuses an unknown tool with a tool error (`isError`) naming the tools it has.

With the 2.x SDK the endpoint needs no undocumented name: a handler's `MCPError` is the protocol
error it carries (so an unknown tool is refused as invalid params with the public API), handlers
for methods outside the core protocol (`tasks/*`) are registered with `Server.add_request_handler`,
and the 2025-11-25 task-augmented `tools/call` is answered by a `Server.middleware` entry (public,
marked provisional by the SDK: the canary's version check is what notices it changing). `RELIED_ON`
is empty; a name added to it must say why there is no public way.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from importlib.metadata import version

# The library versions the names below (and the public-but-provisional ones above) were checked against.
CHECKED = {"mcp": "2.3.0", "mcp-types": "2.3.0"}


@dataclass(frozen=True, slots=True)
class Reliance:
    """One name relied on: `owner` ("module:Class"), the attribute, and what it must be (`instance
    attribute`: assigned by the class's `__init__`)."""

    library: str
    owner: str
    name: str
    kind: str


RELIED_ON: tuple[Reliance, ...] = ()


def installed_versions() -> dict[str, str]:
    return {name: version(name) for name in CHECKED}


def unknown_tool(name: str, known: Collection[str]) -> str:
    """What an agent calling a tool this server does not have is told (either way)."""
    return f"unknown tool {name!r}: this server has {', '.join(sorted(known))}"
