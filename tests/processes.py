"""Child processes the tests start and end themselves (brokers, database clusters, poolers)."""

from __future__ import annotations

import subprocess


def end_process(proc: subprocess.Popen[bytes] | None, *, timeout: float = 10) -> None:
    """SIGTERM a process still running, and SIGKILL it if it has not exited after ``timeout`` s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
