"""The page's listener proxies live as long as the page; its tasks are held exactly until they end."""

import asyncio

from frontend_py.kit import Lifetimes


async def test_listener_proxies_outlive_any_number_of_tasks_and_finished_tasks_are_let_go() -> None:
    lifetimes = Lifetimes()
    proxies = [lifetimes.keep(["listener", i]) for i in range(3)]
    gate = asyncio.Event()

    async def work() -> None:
        await gate.wait()

    tasks = [lifetimes.spawn(work()) for _ in range(250)]
    assert lifetimes.running == 250
    gate.set()
    for task in tasks:
        await task
    assert lifetimes.running == 0
    assert lifetimes.proxies == proxies


async def test_a_failing_task_is_let_go_too() -> None:
    lifetimes = Lifetimes()

    async def fail() -> None:
        raise ValueError("boom")

    task = lifetimes.spawn(fail())
    failed = False
    try:
        await task
    except ValueError:
        failed = True
    assert failed
    assert lifetimes.running == 0
