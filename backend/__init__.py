"""Turnwise: clarifications from AI coding agents, owned by the current turn, delivered exactly once."""
