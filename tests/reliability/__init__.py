"""Reliability evidence: model-based lifecycle tests and API fuzzing."""
