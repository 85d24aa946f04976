"""A tool's input the way people read it (a shell line, a diff, JSON), and the edited input's check."""

import json

from frontend_py.app.views.parts import esc

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, as the server compares an edited input with the asked one."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def pretty_json(value: Any, indent: str = "") -> str:
    """JSON with two-space indents and sorted keys (MicroPython's ``json.dumps`` has neither, and its
    dicts keep no order, so sorting is what makes the text the same wherever it is built)."""
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key in sorted(value):
            items.append(inner + json.dumps(str(key)) + ": " + pretty_json(value[key], inner))
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + ",\n".join([inner + pretty_json(item, inner) for item in value]) + "\n" + indent + "]"
    return json.dumps(value)


def check_edited(text: str, original: Any) -> tuple[Any, str | None]:
    """The edited input decoded, or why it cannot be sent: it must be JSON of the asked input's type.

    Strict syntax is checked by the page (the browser's ``JSON.parse``) before this is called.
    """
    if not text.strip():
        return (None, "The input is empty. Write the tool's input as JSON.")
    try:
        value = json.loads(text)
    except ValueError:
        return (None, "That is not valid JSON. Fix it, then allow again.")
    wanted = json_type(original)
    if json_type(value) != wanted:
        return (None, "The input must be a JSON " + wanted + ", like the one the agent sent.")
    return (value, None)


def _text_field(value: Any, name: str) -> str | None:
    field = value.get(name) if isinstance(value, dict) else None
    return field if isinstance(field, str) else None


def _rest(value: dict[str, Any], shown: tuple[str, ...]) -> dict[str, Any]:
    rest = {}
    for key in value:
        if key not in shown:
            rest[key] = value[key]
    return rest


def _lines(text: str) -> list[str]:
    return text.split("\n")


def diff_rows(old: str, new: str) -> list[tuple[str, str]]:
    """A line diff of one replacement: the lines both share at the start and end as context (" "),
    the old middle removed ("-"), the new middle added ("+")."""
    before, after = _lines(old), _lines(new)
    start = 0
    while start < len(before) and start < len(after) and before[start] == after[start]:
        start += 1
    end = 0
    while (
        end < len(before) - start
        and end < len(after) - start
        and before[len(before) - 1 - end] == after[len(after) - 1 - end]
    ):
        end += 1
    rows = [(" ", line) for line in before[:start]]
    rows += [("-", line) for line in before[start : len(before) - end]]
    rows += [("+", line) for line in after[start : len(after) - end]]
    rows += [(" ", line) for line in before[len(before) - end :]]
    return rows


def diff_html(old: str, new: str) -> str:
    """``diff_rows`` as a block: removed lines red, added lines green, each said in words too."""
    rows = []
    for mark, line in diff_rows(old, new):
        css = {"-": "del", "+": "add", " ": "ctx"}[mark]
        label = {"-": "removed: ", "+": "added: ", " ": ""}[mark]
        rows.append(
            '<span class="perm-line ' + css + '"><span class="visually-hidden">' + label + "</span>"
            '<span class="perm-mark" aria-hidden="true">' + mark + "</span>" + esc(line) + "</span>"
        )
    return '<pre class="perm-diff">' + "".join(rows) + "</pre>"


def input_diff(old: Any, new: Any) -> str:
    """What an edit changed in a tool's input: each changed text field as a line diff under its name,
    anything else as its JSON before and after."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return diff_html(pretty_json(old), pretty_json(new))
    parts = []
    for key in sorted(set(list(old) + list(new))):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if not isinstance(before, str) or not isinstance(after, str):
            before, after = pretty_json(before), pretty_json(after)
        parts.append('<p class="perm-caption perm-file">' + esc(key) + "</p>" + diff_html(before, after))
    return "".join(parts)


def html(value: Any) -> str:
    """A tool's input the way people read it: a ``command`` as a shell line, an ``old_string`` /
    ``new_string`` edit as a diff of its file, anything else (and what those leave out) as JSON."""
    parts = []
    rest: Any = value
    command = _text_field(value, "command")
    old, new = _text_field(value, "old_string"), _text_field(value, "new_string")
    if command is not None:
        description = _text_field(value, "description")
        if description:
            parts.append('<p class="perm-caption">' + esc(description) + "</p>")
        parts.append(
            '<pre class="perm-shell"><span class="visually-hidden">Shell command: </span>'
            '<span class="perm-prompt" aria-hidden="true">$ </span><code>' + esc(command) + "</code></pre>"
        )
        rest = _rest(value, ("command", "description"))
    elif old is not None and new is not None:
        path = _text_field(value, "file_path") or _text_field(value, "path")
        if path:
            parts.append('<p class="perm-caption perm-file">' + esc(path) + "</p>")
        parts.append(diff_html(old, new))
        rest = _rest(value, ("old_string", "new_string", "file_path", "path"))
    if rest is value or (isinstance(rest, dict) and rest):
        parts.append('<pre class="perm-json">' + esc(pretty_json(rest)) + "</pre>")
    return "".join(parts)


def input_summary(value: Any) -> str:
    """One line for a rule's input: its command, its file, else compact JSON."""
    command = _text_field(value, "command")
    if command is not None:
        return command
    path = _text_field(value, "file_path")
    if path is not None:
        return "edit " + path
    return json.dumps(value)
