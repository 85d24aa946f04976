"""Reading permission rules: a rule's text into a `RulePattern`, and a Claude Code `permissions` block
into rules and back.

The syntax is described in `rule_patterns`; what the parentheses hold is read by `rule_specifiers`.
`legacy_pattern` writes, in this syntax, the rules remembered before patterns existed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from backend.domain.rule_patterns import PATH_RULE_TOOLS, Behavior, PatternKind, RulePattern
from backend.domain.rule_specifiers import (
    PatternError,
    command_spec,
    escape_command,
    escaped,
    host_spec,
    path_spec,
    read_specifier,
    render_specifier,
)
from backend.domain.rule_subjects import canonical_input

_TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/+-]*")


def parse_pattern(text: str) -> RulePattern:
    """The rule `text` means, or PatternError naming what is wrong with it. Rules are read once:
    a scope's rules, compiled again, cost only their regexes."""
    if not isinstance(text, str):
        raise PatternError(f"a rule is text, not {type(text).__name__}")
    return _parse(text)


@lru_cache(maxsize=8192)
def _parse(text: str) -> RulePattern:
    raw = text.strip()
    if not raw:
        raise PatternError("the rule is empty")
    open_at = raw.find("(")
    if open_at < 0:
        if ")" in raw:
            raise PatternError(f"{raw!r} has a ')' without a '('")
        return _bare(raw, raw)
    tool = raw[:open_at]
    if not raw.endswith(")") or escaped(raw, len(raw) - 1):
        raise PatternError(f"{raw!r} does not end with the ')' closing its '('")
    if not tool:
        raise PatternError(f"{raw!r} has no tool name before '('")
    content = read_specifier(raw, raw[open_at + 1 : -1])
    if content.strip() in ("", "*"):
        return _bare(raw, tool)
    _check_tool_name(raw, tool)
    return _with_specifier(raw, tool, content)


def _check_tool_name(raw: str, tool: str) -> None:
    if _TOOL_NAME.fullmatch(tool) is None:
        raise PatternError(f"{raw!r}: {tool!r} is not a tool name (letters, digits, _ . : @ / + -)")


def _bare(raw: str, tool: str) -> RulePattern:
    if tool.startswith("mcp__"):
        server, sep, name = tool[len("mcp__") :].partition("__")
        if not server or server == "*":
            raise PatternError(f"{raw!r}: an MCP rule names its server (mcp__server or mcp__server__tool)")
        _check_tool_name(raw, server)
        if not sep or name == "*":
            return RulePattern(f"mcp__{server}", None, PatternKind.MCP_SERVER)
        if not name:
            raise PatternError(f"{raw!r}: no tool name after the server's '__'")
    _check_tool_name(raw, tool)
    return RulePattern(tool, None, PatternKind.ANY)


def _with_specifier(raw: str, tool: str, written: str) -> RulePattern:
    content = written.strip()
    if content.startswith("="):
        try:
            value = json.loads(content[1:])
            key = canonical_input(value)
        except ValueError as exc:
            raise PatternError(f"{raw!r}: what follows '=' is not JSON ({exc})") from None
        return RulePattern(tool, "=" + key, PatternKind.EXACT_INPUT, key=key)
    if tool.startswith("mcp__"):
        raise PatternError(f"{raw!r}: an MCP rule takes no specifier (write {tool} for any input)")
    if content.startswith("domain:") and tool not in ("WebFetch", "Bash"):  # a command may start so
        raise PatternError(f"{raw!r}: 'domain:' belongs to WebFetch rules only")
    if tool == "WebFetch":
        spec, host, regex = host_spec(raw, content)
        if host is not None:
            return RulePattern(tool, spec, PatternKind.HOST, key=host)
        return RulePattern(tool, spec, PatternKind.HOST_PATTERN, regex=regex or "")
    if tool == "Bash":
        command, regex = command_spec(raw, content)
        if command is not None:
            return RulePattern(tool, content, PatternKind.COMMAND, key=command)
        return RulePattern(tool, content, PatternKind.COMMAND_PATTERN, regex=regex or "")
    if tool in PATH_RULE_TOOLS:
        path, root, regex = path_spec(raw, written)
        return RulePattern(tool, path, PatternKind.PATH, regex=regex, root=root)
    raise PatternError(
        f"{raw!r}: {tool} takes no specifier this matcher knows; write {tool} for any input"
        f" or {tool}(=<input as JSON>) for one exact input"
    )


# --- settings and carry-over -----------------------------------------------------------------------


def parse_settings(block: Any) -> list[tuple[Behavior, RulePattern]]:
    """The rules of a Claude Code `permissions` block (or of a whole settings file holding one),
    in the order allow, ask, deny; other keys are ignored. Every bad entry is named by its index
    ("deny[2]: ...") in one PatternError, and then nothing is returned."""
    if isinstance(block, Mapping) and "permissions" in block:
        block = block["permissions"]
    if not isinstance(block, Mapping):
        raise PatternError(
            "expected a permissions block: an object with allow, ask and deny lists", field="permissions"
        )
    rules: list[tuple[Behavior, RulePattern]] = []
    problems: list[str] = []
    for behavior in Behavior:
        entries = block.get(behavior.value)
        if entries is None:
            continue
        if not isinstance(entries, list):
            problems.append(f"{behavior.value}: expected a list of rules")
            continue
        for i, entry in enumerate(entries):
            try:
                rules.append((behavior, parse_pattern(entry)))
            except PatternError as exc:
                problems.append(f"{behavior.value}[{i}]: {exc.reason}")
    if problems:
        count = f"{len(problems)} rule{'s' if len(problems) > 1 else ''} refused"
        raise PatternError(f"{count}: " + "; ".join(problems), field="permissions", problems=problems)
    return rules


def export_settings(rules: Iterable[Sequence[Any]]) -> dict[str, list[str]]:
    """A `permissions` block (allow, ask, deny) holding `rules` ((behavior, pattern[, handle])
    tuples) in their order, each canonical rule once: `parse_settings` reads it back."""
    block: dict[str, list[str]] = {b.value: [] for b in Behavior}
    for rule in rules:
        texts = block[Behavior(rule[0]).value]
        if rule[1].text not in texts:
            texts.append(rule[1].text)
    return block


def legacy_pattern(tool_name: str, tool_input: Any, any_input: bool) -> RulePattern:
    """The pattern a rule remembered before patterns existed becomes, matching what it matched:
    any input -> the bare tool; a `Bash` input of one `command` -> `Bash(<command>)` exact; any
    other input -> `Tool(=<canonical json>)`. PatternError when the tool's name is not one a rule
    can hold."""
    if any_input:
        return parse_pattern(tool_name)
    if tool_name == "Bash" and isinstance(tool_input, Mapping) and set(tool_input) == {"command"}:
        command = tool_input["command"]
        if isinstance(command, str) and command.strip() and command == command.strip():
            return parse_pattern(f"Bash({render_specifier(escape_command(command))})")
    return parse_pattern(f"{tool_name}({render_specifier('=' + canonical_input(tool_input))})")
