"""Use cases: transactions, ordering of steps, and which events to publish after commit."""
