"""The pending-action lifecycle: one service for both kinds (questions, permission requests)."""
