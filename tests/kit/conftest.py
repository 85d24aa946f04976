"""Lets pytest run the kit's ``async def test_...`` coroutines even without pytest-asyncio.

The kit tests are plain functions so the same files run under MicroPython; this hook is the CPython
half of the tiny runner (the browser half lives in the harness page's runner).
"""

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if pyfuncitem.config.pluginmanager.hasplugin("asyncio"):
        return None  # pytest-asyncio (asyncio_mode=auto) already runs coroutine tests
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    asyncio.run(pyfuncitem.obj())
    return True
