"""Calling a job's handler: a plain function, or one that returns an awaitable.

A handler is called on a worker thread, with the run's
:class:`~leasecron.Context` when it takes an argument. When it returns an
awaitable (an ``async def`` handler returns a coroutine), the awaitable runs
to its end in an event loop of its own, created on that worker thread and
closed afterwards, as :func:`asyncio.run` would: the handler's run is not
over until its coroutine is.

An abort of ``ctx.signal`` (``stop``, ``lost``) cancels the coroutine. The
cancellation counts as the handler stopping for that reason: it is raised
as :class:`~leasecron.Aborted`, so a stop hands the run over, exactly as a
plain handler that calls ``ctx.signal.raise_if_aborted()``. A coroutine that
catches the cancellation and returns has returned (the run succeeded).
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
