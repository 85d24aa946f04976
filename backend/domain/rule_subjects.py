"""What a tool call is matched on by permission rules (`domain.rule_patterns`): worked out once per
call, each only when a rule of its kind is there to compare it.

Paths are resolved lexically (no symbolic link is followed): `~/` against the home directory, a
relative path against the project root; only an absolute project or home directory anchors
anything, and a path without one to resolve against matches no path rule.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
from collections.abc import Mapping
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from backend.domain.rule_specifiers import PathRoot
from backend.domain.shell_split import any_part_subjects, split_command


def canonical_input(value: Any) -> str:
    """The JSON a `Tool(=<json>)` rule compares: the form permission requests store their input in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _normal(path: str) -> str:
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("/") else path


def _under(path: str, root: str | None) -> str | None:
    if root is None:
        return None
    if path == root:
        return ""
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


class CallSubjects:
    """One call, with what each kind of rule compares worked out once, when first needed: the
    MCP server, the exact input, the command and its parts, the file path from each root, the host."""

    def __init__(
        self, tool: str, tool_input: Mapping[str, Any], project: str | None, home: str | None
    ) -> None:
        self.tool = tool
        self.input = tool_input if isinstance(tool_input, Mapping) else {}
        self.raw_input: Any = tool_input
        # Only an absolute project or home directory anchors anything.
        self.project = _normal(project) if project and project.startswith("/") else None
        self.home = _normal(home) if home and home.startswith("/") else None

    @cached_property
    def server(self) -> str | None:
        if not self.tool.startswith("mcp__"):
            return None
        server, sep, _ = self.tool[len("mcp__") :].partition("__")
        return f"mcp__{server}" if sep else None

    @cached_property
    def exact_input(self) -> str | None:
        try:
            return canonical_input(self.raw_input)
        except (TypeError, ValueError):
            return None

    @cached_property
    def command(self) -> str | None:
        command = self.input.get("command")
        return command.strip() if isinstance(command, str) else None

    @cached_property
    def parts(self) -> tuple[str, ...] | None:
        return None if self.command is None else split_command(self.command)

    @cached_property
    def loose(self) -> tuple[str, ...]:
        return () if self.command is None else any_part_subjects(self.command, self.parts)

    @cached_property
    def paths(self) -> tuple[tuple[PathRoot, str], ...]:
        raw = self.input.get("file_path", self.input.get("notebook_path"))
        if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
            return ()
        if raw == "~" or raw.startswith("~/"):
            if self.home is None:
                return ()
            raw = self.home + raw[1:]
        elif not raw.startswith("/"):
            if self.project is None:
                return ()
            raw = f"{self.project}/{raw}"
        path = _normal(raw)
        found = [(PathRoot.ABSOLUTE, path[1:])]
        for root, base in ((PathRoot.HOME, self.home), (PathRoot.PROJECT, self.project)):
            rel = _under(path, base)
            if rel is not None:
                found.append((root, rel))
        return tuple(found)

    @cached_property
    def host(self) -> str | None:
        url = self.input.get("url")
        if not isinstance(url, str):
            return None
        try:
            host = urlsplit(url.strip()).hostname
        except ValueError:
            return None
        if not host:
            return None
        host = host.rstrip(".")
        with contextlib.suppress(UnicodeError):
            host = host.encode("idna").decode("ascii")
        return host.lower()
