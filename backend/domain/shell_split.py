"""A shell command cut into the commands it runs, for permission rules (`domain.rule_patterns`).

`a && b || c; d | e & f`, newlines, `( ... )` groups, `$( ... )`, backticks and `<( ... )` each run
a command of their own; quotes (single, double, backslash) keep their text whole, and a command
substitution inside double quotes still runs. Redirections (`2>&1`, `&>`, `>|`) are not
operators. A `#` comment is dropped. The reserved words that open or close a compound (`if`,
`then`, `do`, `{`, `!`, `fi`, `done`, `}` ...) are not commands: they are dropped from the front
of a command, and a command that is only a closing word is dropped.

What cannot be read (an unbalanced quote, parenthesis or backtick) is None: the caller then treats
the command as one unsplittable piece, which no prefix or wildcard rule can allow.
"""

from __future__ import annotations

import re

_OPENERS = frozenset({"{", "!", "if", "then", "else", "elif", "do", "while", "until"})
_CLOSERS = frozenset({"}", "fi", "done", "esac"})
_ASSIGNMENT = re.compile(r"""[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|"(?:[^"\\]|\\.)*"|[^\s'"]*)\s+""")
_WRAPPERS = frozenset({"sudo", "nohup", "time", "nice", "command", "exec", "env"})
_DURATION = re.compile(r"\d+(?:\.\d+)?[smhd]?")
_OPERATOR_CHARS = re.compile(r"[;&|\n()`]+|\$\(")
_FD_DUPLICATION = re.compile(r"(?:\d*[<>]&\d+|\d*[<>]&-|\s)+")  # 2>&1, >&2, <&3, 3>&-


class _Unreadable(Exception):
    pass


def split_command(command: str) -> tuple[str, ...] | None:
    """The commands `command` runs (each stripped, in no promised order), or None when its quoting
    or nesting is unbalanced."""
    splitter = _Splitter(command)
    try:
        splitter.sequence(0, None)
    except _Unreadable:
        return None
    return tuple(splitter.parts)


def any_part_subjects(command: str, parts: tuple[str, ...] | None) -> tuple[str, ...]:
    """What a deny or an ask rule is matched against: the whole command, each command it runs, and
    each of those without leading assignments and wrappers (`FOO=1 sudo rm -rf x` -> `rm -rf x`);
    for an unreadable command, its pieces between operator characters instead of its commands."""
    if parts is None:
        parts = tuple(_trimmed(piece) for piece in _OPERATOR_CHARS.split(command))
    subjects = dict.fromkeys([command.strip(), *parts])
    for part in parts:
        subjects.setdefault(unwrapped(part))
    subjects.pop("", None)
    return tuple(subjects)


def unwrapped(part: str) -> str:
    """`part` without its leading `VAR=value` assignments and wrapper commands."""
    while True:
        match = _ASSIGNMENT.match(part)
        if match is not None:
            part = part[match.end() :]
            continue
        words = part.split(None, 2)
        if len(words) >= 2 and words[0] in _WRAPPERS and not words[1].startswith("-"):
            part = part.split(None, 1)[1]
        elif len(words) == 3 and words[0] == "timeout" and _DURATION.fullmatch(words[1]):
            part = words[2]
        else:
            return part


def _trimmed(text: str) -> str:
    """`text` stripped, without the reserved words opening it; empty when it only closes one, or
    only duplicates a file descriptor (the `2>&1` after a group: it runs nothing)."""
    text = text.strip()
    while True:
        words = text.split(None, 1)
        if not words or words[0] not in _OPENERS:
            break
        text = words[1] if len(words) > 1 else ""
    return "" if text in _CLOSERS or _FD_DUPLICATION.fullmatch(text) else text


class _Splitter:
    def __init__(self, text: str) -> None:
        self.text = text
        self.parts: list[str] = []

    def flush(self, buf: list[str]) -> None:
        part = _trimmed("".join(buf))
        buf.clear()
        if part:
            self.parts.append(part)

    def sequence(self, i: int, closer: str | None) -> int:
        """Read commands from `i` up to `closer` (`)` or a backtick; None: the end of the text);
        the index after the closer. Long: one scanner over every kind of character, each branch a
        few lines, reads better whole than spread over helpers sharing its state."""
        s, buf, depth = self.text, list[str](), 0
        while i < len(s):
            char = s[i]
            if char == "`" and closer == "`":
                self.flush(buf)
                return i + 1
            if char == ")":
                self.flush(buf)
                if depth:
                    depth -= 1
                elif closer == ")":
                    return i + 1
                else:
                    raise _Unreadable
                i += 1
            elif char == "\\":
                if s[i + 1 : i + 2] != "\n":  # a line continuation joins the lines
                    buf.append(s[i : i + 2])
                i += 2
            elif char == "'":
                end = s.find("'", i + 1)
                if end < 0:
                    raise _Unreadable
                buf.append(s[i : end + 1])
                i = end + 1
            elif char == '"':
                i = self.double_quoted(i, buf)
            elif s.startswith("$(", i):
                i = self.substitution(i, i + 2, ")", buf)
            elif char == "`":
                i = self.substitution(i, i + 1, "`", buf)
            elif char == "(" and buf and buf[-1] in ("<", ">"):  # process substitution
                i = self.substitution(i, i + 1, ")", buf)
            elif char == "(":
                self.flush(buf)
                depth += 1
                i += 1
            elif char == "#" and (not buf or buf[-1][-1:].isspace()):
                end = s.find("\n", i)
                i = len(s) if end < 0 else end
            elif char in ";&|\n" and not self.redirection(i, buf):
                self.flush(buf)
                i += 1
            else:
                buf.append(char)
                i += 1
        if closer is not None or depth:
            raise _Unreadable
        self.flush(buf)
        return i

    def redirection(self, i: int, buf: list[str]) -> bool:
        """Whether the `&` or `|` at `i` belongs to a redirection (`2>&1`, `<&3`, `&>`, `>|`)."""
        before = buf[-1][-1:] if buf else ""
        after = self.text[i + 1 : i + 2]
        if self.text[i] == "&":
            return before in ("<", ">") or (after == ">" and before != "&")
        return self.text[i] == "|" and before == ">"

    def double_quoted(self, i: int, buf: list[str]) -> int:
        s, out = self.text, ['"']
        i += 1
        while i < len(s):
            char = s[i]
            if char == "\\":
                out.append(s[i : i + 2])
                i += 2
            elif char == '"':
                out.append(char)
                buf.append("".join(out))
                return i + 1
            elif s.startswith("$(", i):
                i = self.substitution(i, i + 2, ")", out)
            elif char == "`":
                i = self.substitution(i, i + 1, "`", out)
            else:
                out.append(char)
                i += 1
        raise _Unreadable

    def substitution(self, start: int, inner: int, closer: str, buf: list[str]) -> int:
        end = self.sequence(inner, closer)
        buf.append(self.text[start:end])
        return end
