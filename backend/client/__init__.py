"""The Python agent client: `Agent` (ask, ask_permission, prompts, post_message, complete_turn) on one
graphql-transport-ws implementation (`GraphQLTransport`)."""

from backend.client.agent import Agent, AskResult, PermissionResult, Prompt
from backend.client.transport import (
    Connection,
    ConnectionRefused,
    GraphQLRequestError,
    GraphQLTransport,
    Subscription,
)

__all__ = [
    "Agent",
    "AskResult",
    "Connection",
    "ConnectionRefused",
    "GraphQLRequestError",
    "GraphQLTransport",
    "PermissionResult",
    "Prompt",
    "Subscription",
]
