"""Runs every tests/kit test under the browser's MicroPython and reports the results as JSON."""

import json
import os
import sys
import time

TEST_DIR = "tests/kit"
RUNNING: list[object] = []


def _millis() -> int:
    ticks = getattr(time, "ticks_ms", None)
    return int(ticks()) if ticks else int(time.time() * 1000)


def _describe(error: BaseException) -> str:
    printer = getattr(sys, "print_exception", None)
    if printer is None:
        return type(error).__name__ + ": " + str(error)
    import io

    buffer = io.StringIO()
    printer(error, buffer)
    return buffer.getvalue()


def _modules() -> list[str]:
    names = [n[:-3] for n in os.listdir(TEST_DIR) if n.startswith("test_") and n.endswith(".py")]
    return sorted(names)


async def run_all() -> dict[str, object]:
    """Import every test module, run every ``test_*`` (awaiting coroutines), collect outcomes."""
    if TEST_DIR not in sys.path:
        sys.path.append(TEST_DIR)
    started = _millis()
    passed: list[str] = []
    failed: list[dict[str, str]] = []
    for module_name in _modules():
        try:
            module = __import__(module_name)
        except Exception as error:  # noqa: BLE001 - an import error fails the module, not the whole run
            failed.append({"test": module_name, "error": _describe(error)})
            continue
        for name in sorted(dir(module)):
            test = getattr(module, name)
            if not name.startswith("test_") or not callable(test):
                continue
            test_id = module_name + "::" + name
            try:
                outcome = test()
                if hasattr(outcome, "send") and hasattr(outcome, "throw"):
                    await outcome
                passed.append(test_id)
            except Exception as error:  # noqa: BLE001 - any error fails this test, not the run
                failed.append({"test": test_id, "error": _describe(error)})
    return {
        "done": True,
        "implementation": sys.implementation.name,
        "total": len(passed) + len(failed),
        "passed": passed,
        "failed": failed,
        "elapsed_ms": _millis() - started,
    }


async def main() -> None:
    """Run the suite and write the report into ``<pre id="results">`` (PyScript only)."""
    from pyscript import document  # type: ignore[import-not-found]

    try:
        report = await run_all()
    except Exception as error:  # noqa: BLE001 - report a broken runner instead of leaving the page silent
        report = {
            "done": True,
            "total": 0,
            "passed": [],
            "failed": [{"test": "runner", "error": _describe(error)}],
        }
    node = document.getElementById("results")
    node.textContent = json.dumps(report)
    node.setAttribute("data-done", "true")


if __name__ == "__main__":
    # The page runs this file as its script; importing it runs nothing.
    import asyncio

    RUNNING.append(asyncio.create_task(main()))  # held so the task is not collected mid-run
