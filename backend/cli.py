"""`turnwise serve | migrate | export-schema | demo | hook`.

`turnwise hook` runs once per event of an agent's hooks, so it is dispatched before anything else is
imported: this module imports only what its own top needs, and each command what it uses.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `typing`'s: importing it would cost every hook run (the checker takes this)
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from backend.config import Settings

LOG_LEVELS = ("debug", "info", "warning", "error")


def _uvicorn_options(settings: Settings) -> dict[str, Any]:
    """What every way of serving tells uvicorn. Neither its handlers nor its levels: its records go
    through ours, one format on standard error, and `logs.configure` sets which of them show
    (`uvicorn.access`'s request lines whenever TURNWISE_ACCESS_LOG turns them on)."""
    return {
        "log_config": None,
        "log_level": None,
        "access_log": settings.access_log,
        "ws": "websockets-sansio",
        "ws_per_message_deflate": settings.ws_compression,
    }


def _log_level(args: argparse.Namespace) -> str:
    # The demo is for a person at a terminal: its URL block stays the last thing printed, and what
    # the demo agent and the person do shows in the web app (`--log-level info` prints it too).
    default = "warning" if getattr(args, "command", None) == "demo" else "info"
    level = getattr(args, "log_level", None) or os.environ.get("TURNWISE_LOG_LEVEL") or default
    if level.lower() not in LOG_LEVELS:
        print(
            f"turnwise: error: log level must be one of {', '.join(LOG_LEVELS)} (got {level!r})",
            file=sys.stderr,
        )
        raise SystemExit(2)
    # Handed to worker processes of `serve --workers N`, which configure their own logging.
    os.environ["TURNWISE_LOG_LEVEL"] = level.lower()
    return level.lower()


def _settings(args: argparse.Namespace) -> Settings:
    from pydantic import ValidationError

    from backend.config import Settings, problems

    try:
        settings = Settings.from_env()
    except ValidationError as exc:  # a person's typo: what to mend, not a traceback
        for line in problems(exc):
            print(f"turnwise {args.command}: error: {line}", file=sys.stderr)
        raise SystemExit(2) from None
    overrides = {
        k: v
        for k, v in {
            "host": args.host,
            "port": args.port,
            "database_url": args.database_url,
            "broadcast_url": args.broadcast_url,
            "workers": getattr(args, "workers", None),
        }.items()
        if v is not None
    }
    return settings.model_copy(update=overrides)


def _serve_workers(settings: Settings) -> None:
    """N uvicorn worker processes on one port; each builds its app from the environment, so the
    command line's settings are handed down there. Metrics run in prometheus multiprocess mode."""
    import shutil
    import tempfile

    import uvicorn

    from backend.metrics import MULTIPROC_ENV

    os.environ.update(
        TURNWISE_HOST=settings.host,
        TURNWISE_PORT=str(settings.port),
        TURNWISE_DATABASE_URL=settings.database_url,
        TURNWISE_BROADCAST_URL=settings.broadcast_url,
    )
    metrics_dir = tempfile.mkdtemp(prefix="turnwise-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    try:
        uvicorn.run(
            "backend.api.app:create_app_from_env",
            factory=True,
            workers=settings.workers,
            host=settings.host,
            port=settings.port,
            **_uvicorn_options(settings),
        )
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def _when_ready(settings: Settings, text: str) -> None:
    """Print `text` once the server answers `/readyz` (it binds its port after startup finished),
    so it is the last thing a person sees, not scrolled away by start-up lines."""
    import asyncio

    import httpx

    async with httpx.AsyncClient(base_url=f"http://{settings.host}:{settings.port}") as http:
        for _ in range(600):
            try:
                if (await http.get("/readyz", timeout=1)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    print(text, flush=True)


def _startup_failed(failure: str) -> None:
    import logging

    log = logging.getLogger("turnwise.cli")
    # A line of the log, in its format, like everything the server writes to standard error.
    log.error("startup failed, not serving: %s", failure, extra={"event": "startup.failed"})


def _serve(settings: Settings, *, demo: bool = False, announce: str | None = None) -> int:
    import asyncio

    import uvicorn

    from backend.api.app import create_app, tune_collector

    after_start = None
    if demo:
        from backend.services.container import Services

        async def seed_and_start_agent(services: Services) -> None:
            from backend import demo as demo_data
            from backend.executors.demo_agent import DemoAgent

            sessions = await demo_data.prepare(services)
            if settings.bootstrap_token is None:
                raise RuntimeError("the demo agent needs TURNWISE_BOOTSTRAP_TOKEN")
            # Connects through the API like any agent, once the server admits traffic.
            token = settings.bootstrap_token.get_secret_value()
            agent = DemoAgent(f"http://{settings.host}:{settings.port}", token, sessions=sessions)
            loop = asyncio.get_running_loop()
            app.state.demo_agent = loop.create_task(agent.run())
            if announce is not None:
                app.state.announce = loop.create_task(_when_ready(settings, announce))

        after_start = seed_and_start_agent
    app = create_app(settings, after_start=after_start)
    tune_collector()
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            **_uvicorn_options(settings),
        )
    except SystemExit as exc:
        if app.state.runtime.failure is None:
            raise
        _startup_failed(app.state.runtime.failure)
        return exc.code if isinstance(exc.code, int) and exc.code else 1
    if app.state.runtime.failure is not None:
        _startup_failed(app.state.runtime.failure)
        return 1
    return 0


def _demo_token() -> str:
    import secrets
    from pathlib import Path

    import platformdirs

    path = Path(platformdirs.user_data_dir("turnwise")) / "demo-token"
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    problem = settings.scale_out_problem()
    if problem is not None:
        print(f"turnwise serve: error: {problem}", file=sys.stderr)
        return 2
    if settings.workers > 1:
        _serve_workers(settings)
        return 0
    return _serve(settings)


def cmd_demo(args: argparse.Namespace) -> int:
    from pydantic import SecretStr

    settings = _settings(args)
    if settings.workers != 1:
        print("turnwise demo: error: the demo runs one process; unset TURNWISE_WORKERS", file=sys.stderr)
        return 2
    token = settings.bootstrap_token.get_secret_value() if settings.bootstrap_token else ""
    if not token:
        token = _demo_token()
        settings = settings.model_copy(update={"bootstrap_token": SecretStr(token)})
    base = f"http://{settings.host}:{settings.port}"
    block = (
        "\nTurnwise demo is ready\n"
        f"  web app:   {base}/#token={token}\n"
        f"  GraphiQL:  {base}/graphql  (header: Authorization: Bearer {token})\n"
        f"  MCP:       {base}/mcp  (same header; see the README, How an agent connects)\n"
        f"  token:     {token}\n"
        f"  database:  {settings.database_url}\n"
        "  (Ctrl-C stops it; --log-level info prints each ask and answer, debug adds start-up steps)\n"
    )
    return _serve(settings, demo=True, announce=block)


def cmd_migrate(args: argparse.Namespace) -> int:
    import asyncio

    from backend.db import migrate
    from backend.db.engine import Database, PoolerNotSet

    settings = _settings(args)

    async def run() -> None:
        db = Database(settings.database_url, fast_path=settings.db_fast_path, pooler=settings.db_pooler)
        try:
            await migrate.upgrade(db, url=settings.migrate_database_url)
            print(f"database at revision {await migrate.current_revision(db)}")
        finally:
            await db.dispose()

    try:
        asyncio.run(run())
    except PoolerNotSet as exc:  # its message names the setting that mends it
        print(f"turnwise migrate: error: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_export_schema(args: argparse.Namespace) -> int:
    from pathlib import Path

    from backend.api.schema import export_sdl

    sdl = export_sdl()
    if args.output == "-":
        sys.stdout.write(sdl)
    else:
        Path(args.output).write_text(sdl)
    return 0


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["hook"]:
        from backend.hook.main import main as hook

        return hook(words[1:])
    import argparse
    import logging

    from backend import logs

    parser = argparse.ArgumentParser(prog="turnwise")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (("serve", cmd_serve), ("demo", cmd_demo), ("migrate", cmd_migrate)):
        p = sub.add_parser(name)
        p.add_argument("--host", help="TURNWISE_HOST (default 127.0.0.1)")
        p.add_argument("--port", type=int, help="TURNWISE_PORT (default 8000)")
        p.add_argument("--database-url", help="TURNWISE_DATABASE_URL (default: SQLite in the user data dir)")
        p.add_argument("--broadcast-url", help="TURNWISE_BROADCAST_URL (default memory://)")
        p.add_argument(
            "--log-level",
            choices=LOG_LEVELS,
            help="TURNWISE_LOG_LEVEL (default info; warning for demo); debug adds start-up steps and "
            "libraries' request lines",
        )
        if name == "serve":
            p.add_argument(
                "--workers",
                type=int,
                help="TURNWISE_WORKERS (default 1): server processes sharing the port, the database and the "
                "bus; more than one needs PostgreSQL and redis://",
            )
        p.set_defaults(func=func)
    p = sub.add_parser("export-schema")
    p.add_argument("--output", default="schema.graphql")
    p.set_defaults(func=cmd_export_schema)
    # Listed for --help; `main` hands it over before parsing (see `backend/hook/main.py`).
    sub.add_parser("hook", help="report one Claude Code or Codex hook event (see turnwise hook --help)")
    args = parser.parse_args(words)
    logs.configure(getattr(logging, _log_level(args).upper()))
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
