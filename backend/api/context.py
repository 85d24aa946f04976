"""Per-request context: the caller, the services and request-scoped batch loaders."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from strawberry.dataloader import DataLoader

from backend.api.auth import Principal
from backend.domain.errors import Unauthenticated
from backend.domain.lifecycle import Bundle
from backend.domain.records import SessionPending
from backend.services.container import Services
from backend.services.summaries import TaskView


@dataclass
class Context:
    services: Services
    principal_or_none: Principal | None
    request: Any = None
    response: Any = None
    connection_params: dict[str, Any] | None = None
    # Projections read with task views, answered by `pending_by_session` without another read (a
    # plain map rather than thousands of primed futures, most of which nothing asks for).
    _viewed_projections: dict[str, SessionPending] = field(init=False, default_factory=dict)

    # Request-scoped batch loaders, made on first use: most requests (a respond, say) need none.
    @cached_property
    def pending_by_session(self) -> DataLoader[str, SessionPending | None]:
        return DataLoader(load_fn=self._load_pending)

    @cached_property
    def active_bundle_by_session(self) -> DataLoader[str, Bundle | None]:
        return DataLoader(load_fn=self._load_active_bundles)

    @cached_property
    def active_permission_by_session(self) -> DataLoader[str, Bundle | None]:
        return DataLoader(load_fn=self._load_active_permissions)

    @cached_property
    def project_by_task(self) -> DataLoader[str, str | None]:
        """A task's project (`Task.project`), for the rules suggested from its requests."""
        return DataLoader(load_fn=self._load_projects)

    @cached_property
    def task_views(self) -> DataLoader[str, TaskView | None]:
        """Task list / boot: summaries reconciled together with the session projections they derive from."""
        return DataLoader(load_fn=self._load_task_views)

    @property
    def principal(self) -> Principal:
        if self.principal_or_none is None:
            raise Unauthenticated("missing bearer token")
        return self.principal_or_none

    async def _load_task_views(self, task_ids: list[str]) -> list[TaskView | None]:
        views = await self.services.summaries.reconcile(task_ids)
        viewed = self._viewed_projections
        for view in views.values():
            viewed.update(view.projections)
        return [views.get(t) for t in task_ids]

    async def _load_active_bundles(self, session_ids: list[str]) -> list[Bundle | None]:
        bundles = await self.services.pending.active_bundles(session_ids)
        return [bundles.get(s) for s in session_ids]

    async def _load_active_permissions(self, session_ids: list[str]) -> list[Bundle | None]:
        bundles = await self.services.permissions.active(session_ids)
        return [bundles.get(s) for s in session_ids]

    async def _load_projects(self, task_ids: list[str]) -> list[str | None]:
        projects = {t.id: t.project for t in await self.services.reads.tasks(task_ids)}
        return [projects.get(t) for t in task_ids]

    async def _load_pending(self, session_ids: list[str]) -> list[SessionPending | None]:
        viewed = self._viewed_projections
        unread = [s for s in session_ids if s not in viewed]
        projections = await self.services.reads.pending_for_sessions(unread) if unread else {}
        return [viewed[s] if s in viewed else projections.get(s) for s in session_ids]
