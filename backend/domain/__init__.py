"""Plain types and rules with no I/O; imported by every layer, imports nothing of ours."""
