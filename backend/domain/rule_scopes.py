"""Where a permission rule reaches, and in which order the rules that reach a request are read.

A rule applies to one session, to every session of one task, to every task of one project (the
repository folder `Task.project` names), or everywhere. Rules are evaluated deny, then ask, then allow,
and the first that matches decides (`rule_patterns.RuleSet`); within one behavior the narrower scope
comes first, then the older rule, so the rule named for a decision is the closest one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from backend.domain.rule_patterns import PATH_RULE_TOOLS


class Scope(StrEnum):
    SESSION = "session"
    TASK = "task"
    PROJECT = "project"
    GLOBAL = "global"


class RuleBehavior(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


BEHAVIOR_ORDER = {RuleBehavior.DENY: 0, RuleBehavior.ASK: 1, RuleBehavior.ALLOW: 2}
SCOPE_ORDER = {Scope.SESSION: 0, Scope.TASK: 1, Scope.PROJECT: 2, Scope.GLOBAL: 3}

MCP_PREFIX = "mcp__"
LOOKUP_KEYS = 2


def lookup_keys(tool_name: str) -> tuple[str, ...]:
    """The tools a request's candidate rules are stored under (`RulePattern.tool`), LOOKUP_KEYS of
    them (repeated to fill): its own name; its MCP server's ("mcp__<server>"), or for a tool that
    changes files the rule tool whose path rules cover it as well ("Edit" covers Write, MultiEdit and
    NotebookEdit)."""
    keys = [tool_name]
    if tool_name.startswith(MCP_PREFIX):
        server = tool_name[len(MCP_PREFIX) :].partition("__")[0]
        keys.append(MCP_PREFIX + server)
    keys += [rule_tool for rule_tool, tools in PATH_RULE_TOOLS.items() if tool_name in tools]
    unique = list(dict.fromkeys(keys))
    if len(unique) > LOOKUP_KEYS:
        raise ValueError(f"{tool_name!r} is looked up under {unique}: more than {LOOKUP_KEYS} keys")
    return tuple(unique + [tool_name] * (LOOKUP_KEYS - len(unique)))


@dataclass(frozen=True, slots=True)
class RuleRecord:
    """One stored rule."""

    id: str
    pattern: str
    behavior: RuleBehavior
    scope: Scope
    scope_id: str | None
    tool_name: str
    # A rule for one exact input (`Tool(=<json>)`, or remembered so before patterns): that input, which
    # it matches by value without its pattern being read (None for every other rule).
    input: Any
    exact: bool
    expires_at: dt.datetime | None
    created_by: str | None
    source_pending_id: str | None
    created_at: dt.datetime

    @property
    def session_id(self) -> str | None:
        return self.scope_id if self.scope == Scope.SESSION else None

    @property
    def any_input(self) -> bool:
        """Every input of its tool: a bare tool name, not an exact-input rule."""
        return not self.exact and self.pattern == self.tool_name

    def expired(self, now: dt.datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def order(self) -> tuple[int, int, dt.datetime, str]:
        """Its place in evaluation order (deny, ask, allow; the narrower scope, the older first)."""
        return (BEHAVIOR_ORDER[self.behavior], SCOPE_ORDER[self.scope], self.created_at, self.id)


def in_evaluation_order(rules: list[RuleRecord]) -> list[RuleRecord]:
    return sorted(rules, key=RuleRecord.order)
