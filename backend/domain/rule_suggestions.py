"""The permission rules a person likely means for one tool call, narrowest first (`suggest_rules`).

This exact call; the command's prefix (`Bash`), the file's folder (path tools), the host
(`WebFetch`) or the server (MCP); then the bare tool, marked broad with a warning for the tools whose
any input lets anything through.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backend.domain.rule_patterns import PATH_RULE_TOOLS, PATH_TOOLS, PatternKind, RulePattern
from backend.domain.rule_specifiers import (
    PathRoot,
    PatternError,
    escape_command,
    glob_escape,
    render_specifier,
)
from backend.domain.rule_subjects import CallSubjects
from backend.domain.rule_syntax import legacy_pattern, parse_pattern

_EDIT_TOOLS = frozenset(PATH_RULE_TOOLS["Edit"])


@dataclass(frozen=True)
class Suggestion:
    pattern: RulePattern
    label: str
    broad: bool = False
    warning: str | None = None


BROAD_WARNINGS = {
    "Bash": "Runs every shell command without asking, whatever it does: deleting files (rm -rf), "
    "pushing or force-pushing code, deploying, installing packages, sending data anywhere (curl).",
    "Write": "Creates or overwrites any file the agent can reach, inside the project or not, "
    "without asking: configuration, credentials and scripts included.",
    "Edit": "Changes any file the agent can reach, inside the project or not, without asking: "
    "configuration, credentials and scripts included.",
}
BROAD_WARNINGS["MultiEdit"] = BROAD_WARNINGS["NotebookEdit"] = BROAD_WARNINGS["Edit"]
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+][A-Za-z0-9_.@%+-]*")


def suggest_rules(
    tool_name: str, tool_input: Mapping[str, Any], *, project: str | None = None, home: str | None = None
) -> list[Suggestion]:
    """The rules a person likely means, narrowest first: this exact call; the command's prefix
    (`Bash`) or the file's folder (path tools) or the host (`WebFetch`) or the server (MCP);
    the bare tool, `broad` with a warning for the tools whose any input lets anything through.
    Nothing for a tool whose name no rule can hold."""
    try:
        return _suggestions(tool_name, tool_input, project, home)
    except PatternError:
        return []


def _suggestions(
    tool_name: str, tool_input: Mapping[str, Any], project: str | None, home: str | None
) -> list[Suggestion]:
    out: list[Suggestion] = []
    command = tool_input.get("command")
    if tool_name == "Bash" and isinstance(command, str) and command.strip():
        out += _command_suggestions(command)
    elif tool_name in PATH_TOOLS and CallSubjects(tool_name, tool_input, project, home).paths:
        out += _path_suggestions(tool_name, CallSubjects(tool_name, tool_input, project, home))
    else:
        out.append(Suggestion(legacy_pattern(tool_name, tool_input, False), "This exact call"))
    host = CallSubjects(tool_name, tool_input, project, home).host if tool_name == "WebFetch" else None
    if host is not None:
        out.append(Suggestion(parse_pattern(f"WebFetch(domain:{host})"), f"Fetches from {host}"))
    bare = parse_pattern(tool_name)
    if bare.kind is PatternKind.ANY and tool_name.startswith("mcp__"):
        server = tool_name.split("__")[1]
        out.append(Suggestion(bare, f"Any call of {tool_name}"))
        bare = parse_pattern(f"mcp__{server}")
        out.append(Suggestion(bare, f"Any tool of the MCP server {server}"))
    else:
        warning = BROAD_WARNINGS.get(tool_name)
        noun = {"Bash": "Any Bash command", "Read": "Any file read"}.get(tool_name)
        label = noun or ("Any file change" if tool_name in _EDIT_TOOLS else f"Any use of {tool_name}")
        out.append(Suggestion(bare, label, broad=warning is not None, warning=warning))
    return out


def _command_suggestions(command: str) -> list[Suggestion]:
    command = command.strip()
    out = [
        Suggestion(parse_pattern(f"Bash({render_specifier(escape_command(command))})"), "This exact command")
    ]
    prefix = command_prefix(command)
    if prefix is not None:
        out.append(Suggestion(parse_pattern(f"Bash({prefix}:*)"), f"Commands starting with `{prefix}`"))
    return out


def command_prefix(command: str) -> str | None:
    """The first words of `command` a prefix rule would name: the first two when the second is
    neither a flag nor a path, else the first; never past a shell operator or a quote; None when
    the command does not start with a plain word."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    try:
        for token in lexer:
            if len(words) == 2 or _PLAIN_WORD.fullmatch(token) is None:
                break
            words.append(token)
    except ValueError:  # an unbalanced quote: nothing to suggest a prefix of
        return None
    while words and re.match(re.escape(" ".join(words)) + r"(?:[ \t]|$|[;|\n]|&(?!>))", command) is None:
        words.pop()  # a word quoted, escaped or glued to the next: the rule would not match it
    if len(words) == 2 and (words[1].startswith(("-", ".", "~")) or "/" in words[1]):
        words.pop()
    return " ".join(words) or None


_ROOT_WRITTEN = {PathRoot.PROJECT: "", PathRoot.HOME: "~/", PathRoot.ABSOLUTE: "//"}
_ROOT_NAMED = {
    PathRoot.PROJECT: "this project",
    PathRoot.HOME: "your home directory",
    PathRoot.ABSOLUTE: "any folder",
}


def _path_suggestions(tool_name: str, request: CallSubjects) -> list[Suggestion]:
    root, rel = request.paths[-1]  # the narrowest root: the project, else the home, else "/"
    written, folder = _ROOT_WRITTEN[root], posixpath.dirname(rel)
    rule_tool, file_verb, folder_verb = (
        ("Read", "Reads of", "Reads in") if tool_name == "Read" else ("Edit", "Changes to", "Edits in")
    )
    file_spec = f"{written}{glob_escape(rel)}"
    if not written and "/" not in rel:
        file_spec = f"./{file_spec}"  # anchored at the project root, as a path holding a / is
    folder_spec = f"{written}{glob_escape(folder)}/**" if folder else f"{written or './'}**"
    where = f"{written}{folder}/" if folder else _ROOT_NAMED[root]
    return [
        Suggestion(
            parse_pattern(f"{rule_tool}({render_specifier(file_spec)})"), f"{file_verb} {written}{rel}"
        ),
        Suggestion(parse_pattern(f"{rule_tool}({render_specifier(folder_spec)})"), f"{folder_verb} {where}"),
    ]
