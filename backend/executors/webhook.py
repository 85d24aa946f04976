"""Webhook executor: POST the prompt to a configured URL; 2xx accepts, 4xx/5xx rejects."""

from __future__ import annotations

import logging
from dataclasses import asdict

import httpx

from backend.executors.base import DispatchOutcome, DispatchResult, PromptRequest

log = logging.getLogger("turnwise.executors.webhook")


class WebhookExecutor:
    name = "webhook"

    def __init__(self, url: str, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url
        self._transport = transport

    async def dispatch(self, request: PromptRequest, *, deadline_seconds: float) -> DispatchResult:
        body = {"type": "prompt", **asdict(request)}
        try:
            async with httpx.AsyncClient(timeout=deadline_seconds, transport=self._transport) as client:
                response = await client.post(self.url, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            # Nothing reached the receiver: safe to roll back.
            return DispatchResult(DispatchOutcome.REJECTED, f"not delivered: {type(exc).__name__}")
        except httpx.HTTPError as exc:
            # The request may have been received (read timeout, dropped connection after sending).
            return DispatchResult(DispatchOutcome.AMBIGUOUS, f"no answer: {type(exc).__name__}")
        if 200 <= response.status_code < 300:
            return DispatchResult(DispatchOutcome.ACCEPTED, str(response.status_code))
        return DispatchResult(DispatchOutcome.REJECTED, f"refused with HTTP {response.status_code}")
