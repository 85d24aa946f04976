"""All SQL lives here; functions take a connection and never publish events."""
