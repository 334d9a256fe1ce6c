"""Calling a job's handler: a plain function, or one that returns an awaitable.

An awaitable (an ``async def`` handler's coroutine) runs to its end in an
event loop of its own on the worker thread, as :func:`asyncio.run` would. An
abort of ``ctx.signal`` cancels it, and the cancellation is raised as
:class:`~leasecron.Aborted`: a stop hands the run over, as it does for a
plain handler that calls ``ctx.signal.raise_if_aborted()``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable

from ..context import Context
from ..errors import Aborted

__all__ = ["call_handler"]


def call_handler(func: Callable[..., Any], takes_context: bool, context: Context) -> None:
    """Call ``func`` (with ``context`` if it takes it) and, if it returns an awaitable, await it."""
    result = func(context) if takes_context else func()
    if inspect.isawaitable(result):
        _run_awaitable(result, context)


def _run_awaitable(awaitable: Awaitable[Any], context: Context) -> None:
    """Run ``awaitable`` in a new event loop on this thread; an abort of the signal cancels it."""
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(_awaited(awaitable))

        def cancel() -> None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop is closed: the coroutine has ended already
                pass

        remove = context.signal.on_abort(cancel)
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            if not context.signal.aborted:  # cancelled from inside, not by us: that is the handler's error
                raise
            raise Aborted(f"run aborted ({context.signal.reason}): the coroutine was cancelled") from None
        finally:
            remove()
    finally:
        _close(loop)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the handler left running, then close the loop (what ``asyncio.run`` does)."""
    try:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
