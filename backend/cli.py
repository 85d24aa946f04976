"""`turnwise serve | migrate | export-schema | demo`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import secrets
import sys
from pathlib import Path

import platformdirs
import uvicorn

from backend.config import Settings


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    overrides = {
        k: v
        for k, v in {
            "host": args.host,
            "port": args.port,
            "database_url": args.database_url,
            "broadcast_url": args.broadcast_url,
        }.items()
        if v is not None
    }
    return dataclasses.replace(settings, **overrides)


def _serve(settings: Settings, *, demo: bool = False) -> None:
    from backend.api.app import create_app

    app = create_app(settings)
    if demo:
        from backend import demo as demo_data

        async def seed(services: object) -> None:
            from backend.services.container import Services

            assert isinstance(services, Services)
            await demo_data.seed(services)

        app.state.runtime.startup_steps.append(seed)

        async def start_demo_agent(services: object) -> None:
            # Connects through the API like any agent, once the server admits traffic.
            from backend.executors.demo_agent import DemoAgent

            assert settings.bootstrap_token is not None
            agent = DemoAgent(f"http://{settings.host}:{settings.port}", settings.bootstrap_token)
            app.state.demo_agent = asyncio.get_running_loop().create_task(agent.run())

        app.state.runtime.startup_steps.append(start_demo_agent)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", ws="websockets-sansio")


def _demo_token() -> str:
    path = Path(platformdirs.user_data_dir("turnwise")) / "demo-token"
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


def cmd_serve(args: argparse.Namespace) -> int:
    _serve(_settings(args))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if not settings.bootstrap_token:
        settings = dataclasses.replace(settings, bootstrap_token=_demo_token())
    base = f"http://{settings.host}:{settings.port}"
    print(
        "\nTurnwise demo\n"
        f"  web app:   {base}/#token={settings.bootstrap_token}\n"
        f"  GraphiQL:  {base}/graphql  (header: Authorization: Bearer {settings.bootstrap_token})\n"
        f"  MCP:       {base}/mcp  (same header; see the README, How an agent connects)\n"
        f"  token:     {settings.bootstrap_token}\n"
        f"  database:  {settings.database_url}\n",
        flush=True,
    )
    _serve(settings, demo=True)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from backend.db import migrate
    from backend.db.engine import Database

    async def run() -> None:
        db = Database(_settings(args).database_url)
        try:
            await migrate.upgrade(db)
            print(f"database at revision {await migrate.current_revision(db)}")
        finally:
            await db.dispose()

    asyncio.run(run())
    return 0


def cmd_export_schema(args: argparse.Namespace) -> int:
    from backend.api.schema import export_sdl

    sdl = export_sdl()
    if args.output == "-":
        sys.stdout.write(sdl)
    else:
        Path(args.output).write_text(sdl)
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(prog="turnwise")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (("serve", cmd_serve), ("demo", cmd_demo), ("migrate", cmd_migrate)):
        p = sub.add_parser(name)
        p.add_argument("--host", help="TURNWISE_HOST (default 127.0.0.1)")
        p.add_argument("--port", type=int, help="TURNWISE_PORT (default 8000)")
        p.add_argument("--database-url", help="TURNWISE_DATABASE_URL (default: SQLite in the user data dir)")
        p.add_argument("--broadcast-url", help="TURNWISE_BROADCAST_URL (default memory://)")
        p.set_defaults(func=func)
    p = sub.add_parser("export-schema")
    p.add_argument("--output", default="schema.graphql")
    p.set_defaults(func=cmd_export_schema)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
