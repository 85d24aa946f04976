"""Fault-injection points named in configuration (TURNWISE_FAULT_POINTS), for crash and failure tests.

`await hit("name")` ends the process abruptly (no cleanup, no commit of anything still open), like a
crash at that line. `check("name")` raises InjectedFault instead, for failure modes that a running
process must survive (e.g. a repository read failing). `await hit("name")` also waits
TURNWISE_FAULT_DELAY_SECONDS (default 5) where `delay:name` is configured: a window between two
steps in which a test breaks something outside the process (stops the database, say). Production
configures no points.

`await reached("name")` runs the hook a test installed there in this process (`holding`), so a test
can hold one step of a running service while it changes something else; without a hook it does
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator

log = logging.getLogger("turnwise.faults")

# What a killed process reports; distinct from ordinary failures in test logs.
CRASH_EXIT_CODE = 86

_points: frozenset[str] = frozenset()
_hooks: dict[str, Callable[[], Awaitable[None]]] = {}


class InjectedFault(RuntimeError):
    """Raised by `check` at a configured point; never caught specially, so it behaves like any failure."""


def configure(points: Iterable[str]) -> None:
    global _points
    _points = frozenset(p for p in points if p)


def configured() -> frozenset[str]:
    return _points


async def hit(name: str) -> None:
    if _points and f"delay:{name}" in _points:
        log.warning("fault point reached: waiting", extra={"event": "fault.delay", "point": name})
        await asyncio.sleep(float(os.environ.get("TURNWISE_FAULT_DELAY_SECONDS") or 5))
    if name in _points:
        log.warning("fault point reached: exiting", extra={"event": "fault.crash", "point": name})
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)


def check(name: str) -> None:
    if name in _points:
        raise InjectedFault(f"injected fault at {name}")


async def reached(name: str) -> None:
    hook = _hooks.get(name)
    if hook is not None:
        await hook()


@contextlib.contextmanager
def holding(name: str, hook: Callable[[], Awaitable[None]]) -> Iterator[None]:
    """Run `hook` wherever this process reaches `name`, until the block ends."""
    _hooks[name] = hook
    try:
        yield
    finally:
        _hooks.pop(name, None)
