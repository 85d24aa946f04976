"""Extension hooks looked up once per schema and set of extension classes, entered as Strawberry would.

Strawberry enters every stage of every operation, and every result a subscription sends, through a
context manager that looks each extension's hook up again, and wraps a generator hook in a new
`contextlib.contextmanager` of a new bound method each time (`functools.wraps` included). For one
change fanned out to ten thousand subscriptions that was a fifth of the process's CPU: `ErrorPolicy`
(Strawberry's `MaskErrors`) has an `on_stream_result` hook, entered for each result sent.

`StagePlans` looks the hooks up once per set of extension classes (in a dict the schema keeps), and
enters the same hooks in the same order with the same arguments: a generator hook through
`contextlib.contextmanager` (made once per hook), a stage without hooks through one shared object
that does nothing, and anything else (a hook that is a plain function or coroutine function) is left
to Strawberry's own context manager. An exception raised inside a stage reaches the hooks as it does
in Strawberry's, and, as there, is never suppressed by one.

Only public names of Strawberry are read here (`SchemaExtension` and its hooks); the runner that
uses these plans, a subclass of Strawberry's undocumented `SchemaExtensionsRunner`, is
`backend/api/strawberry_adapter.py`'s `LeanExtensionsRunner`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

# (hook name, extension classes) -> per hook: (index of its extension, context manager factory taking
# the extension and the hook's arguments, whether it is async); None: a hook Strawberry must enter.
HookPlan = tuple[tuple[int, Callable[..., Any], bool], ...] | None


def _plan_hooks(name: str, classes: tuple[type[Any], ...]) -> HookPlan:
    from strawberry.extensions import SchemaExtension

    default = getattr(SchemaExtension, name)
    plan: list[tuple[int, Callable[..., Any], bool]] = []
    for index, cls in enumerate(classes):
        hook = getattr(cls, name)
        if hook is default:
            continue
        if inspect.isgeneratorfunction(hook):
            plan.append((index, contextlib.contextmanager(hook), False))
        elif inspect.isasyncgenfunction(hook):
            plan.append((index, contextlib.asynccontextmanager(hook), True))
        else:
            return None  # a plain function or coroutine function: Strawberry's own manager enters it
    return tuple(plan)


class _NoHooks:
    """A stage no extension has a hook for: nothing to enter or leave, with or without `async`."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_HOOKS = _NoHooks()


class _Hooks:
    """The hooks of one stage, entered in order and left in reverse, as Strawberry's manager does
    (through an exit stack when there are several), never suppressing the exception they see."""

    __slots__ = ("_managers", "_name", "_stack")

    def __init__(self, managers: list[tuple[Any, bool, Any]], name: str) -> None:
        self._managers = managers
        self._name = name
        self._stack: Any = None

    def __enter__(self) -> None:
        for _, is_async, extension in self._managers:
            if is_async:
                raise RuntimeError(
                    f"SchemaExtension hook {extension}.{self._name} failed to complete synchronously."
                )
        if len(self._managers) == 1:
            self._managers[0][0].__enter__()
            return
        self._stack = stack = contextlib.ExitStack()
        stack.__enter__()
        for manager, _, _ in self._managers:
            stack.enter_context(manager)

    def __exit__(self, *exc: Any) -> None:
        if self._stack is None:
            self._managers[0][0].__exit__(*exc)
        else:
            self._stack.__exit__(*exc)

    async def __aenter__(self) -> None:
        if len(self._managers) == 1:
            manager, is_async, _ = self._managers[0]
            if is_async:
                await manager.__aenter__()
            else:
                manager.__enter__()
            return
        self._stack = stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        for manager, is_async, _ in self._managers:
            if is_async:
                await stack.enter_async_context(manager)
            else:
                stack.enter_context(manager)

    async def __aexit__(self, *exc: Any) -> None:
        if self._stack is not None:
            await self._stack.__aexit__(*exc)
            return
        manager, is_async, _ = self._managers[0]
        if is_async:
            await manager.__aexit__(*exc)
        else:
            manager.__exit__(*exc)


class StagePlans:
    """The hook plans of one operation's extensions, kept in `plans` (the schema's own dict, shared by
    its operations) by stage and set of extension classes, each planned on first use."""

    __slots__ = ("_classes", "_plans")

    def __init__(self, plans: dict[Any, HookPlan], extensions: Sequence[Any]) -> None:
        self._plans = plans
        self._classes = tuple(type(e) for e in extensions)

    def _plan(self, name: str) -> HookPlan:
        key = (name, self._classes)
        try:
            return self._plans[key]
        except KeyError:
            plan = self._plans[key] = _plan_hooks(name, self._classes)
            return plan

    def stage(self, name: str, extensions: Sequence[Any], *args: Any) -> Any:
        """The context manager entering hook `name` of `extensions` (with `args`), or None where
        Strawberry's own manager must enter it."""
        plan = self._plan(name)
        if plan is None:
            return None
        if not plan:
            return _NO_HOOKS
        return _Hooks(
            [(make(extensions[i], *args), is_async, extensions[i]) for i, make, is_async in plan], name
        )

    def results_of_their_own(self) -> bool:
        """Whether an extension has results of its own (`get_results` overridden): else each would
        give an empty dict, and the operation's results are its context's alone."""
        key = ("get_results", self._classes)
        plain = self._plans.get(key)
        if plain is None:
            from strawberry.extensions import SchemaExtension

            default = SchemaExtension.get_results
            none_own = all(c.get_results is default for c in self._classes)
            plain = self._plans[key] = () if none_own else None
        return plain is None
