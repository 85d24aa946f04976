"""GraphQL API (Strawberry) and the Starlette application."""
