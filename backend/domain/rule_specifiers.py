"""What a permission rule's parentheses hold, read into what it compares (`domain.rule_patterns`).

Three layers of text: the rule (`Bash(echo \\(x\\))`), its specifier once the rule's escapes are
read (`echo (x)`), and what the specifier compares: an exact text, or a regex matched fully
(DOTALL) against a command, a host, or a path relative to the pattern's root.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum

from backend.domain.errors import InvalidInput

_WORD_BOUNDARY = r"(?:\s.*)?"
_HOST = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*")
_IPV6 = re.compile(r"[0-9a-f.]*:[0-9a-f.]*:[0-9a-f:.]*")


class PatternError(InvalidInput):
    """A rule (or a settings block) this matcher cannot read; `problems` lists each one, by index
    for a settings block ("deny[2]: ...")."""

    def __init__(self, reason: str, *, field: str = "pattern", problems: Sequence[str] = ()) -> None:
        super().__init__(field, reason)
        self.reason = reason
        self.problems = list(problems) or [reason]


class PathRoot(Enum):
    ABSOLUTE = "absolute"
    HOME = "home"
    PROJECT = "project"


def escaped(text: str, at: int) -> bool:
    """Whether the character at `at` follows an odd run of backslashes."""
    backslashes = len(text[:at]) - len(text[:at].rstrip("\\"))
    return backslashes % 2 == 1


def read_specifier(raw: str, inner: str) -> str:
    """The specifier `inner` (the text between a rule's parentheses) holds: `\\\\`, `\\(`, `\\)` read
    as the character escaped; PatternError when its own parentheses do not balance."""
    out: list[str] = []
    depth = i = 0
    while i < len(inner):
        char = inner[i]
        if char == "\\" and inner[i + 1 : i + 2] in ("\\", "(", ")"):
            out.append(inner[i + 1])
            i += 2
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            raise PatternError(f"{raw!r} has an unbalanced ')' inside its parentheses (write \\) for one)")
        out.append(char)
        i += 1
    if depth:
        raise PatternError(f"{raw!r} has an unbalanced '(' inside its parentheses (write \\( for one)")
    return "".join(out)


def render_specifier(content: str) -> str:
    """`content` written inside a rule's parentheses so that `read_specifier` reads it back
    unchanged: parentheses escaped only when they do not balance, a backslash doubled only where
    it would otherwise escape."""
    depth, balanced = 0, True
    for char in content:
        depth += {"(": 1, ")": -1}.get(char, 0)
        balanced = balanced and depth >= 0
    balanced = balanced and depth == 0
    out: list[str] = []
    for i, char in enumerate(content):
        if char == "\\":
            out.append("\\\\" if content[i + 1 : i + 2] in ("", "\\", "(", ")") else "\\")
        elif char in "()" and not balanced:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def escape_command(command: str) -> str:
    """A `Bash` specifier matching exactly `command`: its `\\` and `*` escaped, and a leading `=`
    (which would otherwise open an exact-input rule)."""
    text = command.replace("\\", "\\\\").replace("*", "\\*")
    return "\\" + text if text.startswith("=") else text


def glob_escape(path: str) -> str:
    """A path pattern matching exactly `path`: whitespace at either end escaped (it would be
    dropped), and a leading `~` (it would name the home directory)."""
    text = re.sub(r"([\\*?\[!=])", r"\\\1", path)
    if len(path) > 1 and path[-1].isspace():
        text = text[:-1] + "\\" + text[-1]
    return "\\" + text if path[:1].isspace() or path[:1] == "~" else text


def command_spec(raw: str, content: str) -> tuple[str | None, str | None]:
    """A `Bash` specifier as (the exact command, None) or (None, its regex): `prefix:*` is the
    prefix at a word boundary, `*` any run of characters, a lone trailing ` *` optional."""
    pieces: list[str | None] = []  # literal text, None for a wildcard
    literal: list[str] = []
    i = 0
    while i < len(content):
        char = content[i]
        if char == "\\" and (content[i + 1 : i + 2] in ("*", "\\") or content[: i + 2] == "\\="):
            literal.append(content[i + 1])  # \* and \\ anywhere, \= at the start
            i += 2
            continue
        if char == "*":
            pieces.extend(["".join(literal), None])
            literal = []
        else:
            literal.append(char)
        i += 1
    pieces.append("".join(literal))
    stars = pieces.count(None)
    if not stars:
        return "".join(p or "" for p in pieces), None
    before = pieces[-3] if len(pieces) >= 3 else None
    if pieces[-1] == "" and isinstance(before, str) and before.endswith(":"):  # legacy prefix:*
        head = [*pieces[:-3], before[:-1].rstrip()]
        if not "".join("*" if p is None else p for p in head).strip():
            raise PatternError(f"{raw!r}: nothing before ':*' (write Bash for any command)")
        return None, _wildcards(head) + _WORD_BOUNDARY
    if stars == 1 and pieces[-1] == "" and isinstance(before, str) and before.endswith(" "):
        return None, re.escape(before.rstrip()) + _WORD_BOUNDARY  # `ls *` also matches `ls`
    return None, _wildcards(pieces)


def _wildcards(pieces: Sequence[str | None]) -> str:
    return "".join(".*" if p is None else re.escape(p) for p in pieces)


def host_spec(raw: str, content: str) -> tuple[str, str | None, str | None]:
    """A `WebFetch` specifier as (its canonical text, the exact host or None, a host regex or None):
    `domain:host` exactly, `domain:*.host` its subdomains, `domain:*` any host."""
    if not content.startswith("domain:"):
        raise PatternError(f"{raw!r}: a WebFetch rule is WebFetch(domain:<host>)")
    host = content[len("domain:") :].strip().lower().rstrip(".")
    if host == "*":
        return "domain:*", None, ".+"
    base = host[2:] if host.startswith("*.") else host
    if _HOST.fullmatch(base) is None and _IPV6.fullmatch(base.strip("[]")) is None:
        raise PatternError(
            f"{raw!r}: {base!r} is not a host name (domain:example.com or domain:*.example.com)"
        )
    base = base.strip("[]")
    if host.startswith("*."):
        return f"domain:*.{base}", None, r"(?:[^.]+\.)+" + re.escape(base)
    return f"domain:{base}", base, None


def path_spec(raw: str, written: str) -> tuple[str, PathRoot, str]:
    """A path specifier as its text (leading whitespace and unescaped trailing whitespace dropped,
    as gitignore drops trailing spaces), its root and its regex over a path relative to the root."""
    content = written.lstrip()
    while content[-1:].isspace() and not escaped(content, len(content) - 1):
        content = content[:-1]
    anchored = True
    if content.startswith("!"):
        raise PatternError(f"{raw!r}: negated paths ('!') are not supported; write a deny rule instead")
    if content.startswith("//"):
        root, rest = PathRoot.ABSOLUTE, content[2:]
    elif content == "~" or content.startswith("~/"):
        root, rest = PathRoot.HOME, content[2:]
    elif content.startswith("~"):
        raise PatternError(f"{raw!r}: only ~/ (the home directory) is supported, not ~user")
    elif content.startswith("/"):
        root, rest = PathRoot.PROJECT, content[1:]
    elif content == "." or content.startswith("./"):
        root, rest = PathRoot.PROJECT, content[2:]
    else:
        root, rest, anchored = PathRoot.PROJECT, content, "/" in content.rstrip("/")
    if ".." in rest.split("/"):
        raise PatternError(f"{raw!r}: '..' is not supported; write //absolute/path instead")
    regex = _gitignore(raw, rest.lstrip("/"), anchored)
    try:
        re.compile(regex)
    except re.error as exc:
        raise PatternError(f"{raw!r}: not a path pattern ({exc})") from None
    return content, root, regex


def _gitignore(raw: str, rest: str, anchored: bool) -> str:
    """The regex a gitignore pattern (relative to its root) is, over a path relative to that root:
    the path itself or, the pattern naming a directory, anything under it."""
    directory = rest.endswith("/")
    segments = [s for s in rest.split("/") if s not in ("", ".")]
    if not segments:
        return ".*"
    out = ["" if anchored else "(?:.*/)?"]
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:.*/)?")
        else:
            out.append(_glob(raw, segment) + ("" if last else "/"))
    if segments[-1] != "**":
        out.append("/.+" if directory else "(?:/.*)?")
    return "".join(out)


def _glob(raw: str, segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        if char == "[":
            start = i + 2 if segment[i + 1 : i + 2] in ("!", "^") else i + 1
            close = segment.find("]", start + 1)
            if close > 0:
                body = segment[start:close]
                if "/" in body or any(c in body for c in "[\\"):
                    raise PatternError(f"{raw!r}: a [class] holds no '/', '[' or '\\'")
                out.append(f"[^/{body}]" if start == i + 2 else f"[{body}]")
                i = close + 1
                continue
        out.append({"*": "[^/]*", "?": "[^/]"}.get(char) or re.escape(char))
        i += 1
    return "".join(out)
