"""Which of the page's loads are on their way, which failed and why, which lists have arrived."""

# Kept apart from the data they load: a failure is the page's to show, never a state of the store,
# so a failed load can neither empty a held list nor move the route.


def sessions_key(task_id: str) -> str:
    return "sessions:" + task_id


def history_key(session_id: str) -> str:
    return "history:" + session_id


class Loads:
    """Per load (a task's session list, a session's history): in flight, failed and why, arrived.

    Only the newest load of a key decides whether the key stands failed: an older one ending late
    neither clears nor sets its failure.
    """

    def __init__(self) -> None:
        self._running: dict[str, int] = {}
        self._failures: dict[str, str] = {}
        self._arrived: set[str] = set()

    def start(self, key: str) -> None:
        self._running[key] = self._running.get(key, 0) + 1

    def finish(self, key: str, newest: bool, failure: str | None = None) -> None:
        left = self._running.get(key, 0) - 1
        if left > 0:
            self._running[key] = left
        else:
            self._running.pop(key, None)
        if not newest:
            return
        if failure is None:
            self._failures.pop(key, None)
            self._arrived.add(key)
        else:
            self._failures[key] = failure

    def running(self, key: str) -> bool:
        return key in self._running

    def failure(self, key: str) -> str | None:
        return self._failures.get(key)

    def arrived(self, key: str) -> bool:
        return key in self._arrived
