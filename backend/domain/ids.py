"""Identifier generation: time-ordered, fixed-width, so ties on timestamps break in creation order."""

from __future__ import annotations

import os
import time


def new_id() -> str:
    # 16 hex digits of nanoseconds keep lexicographic order == time order until the year 2554.
    return f"{time.time_ns():016x}{os.urandom(6).hex()}"
