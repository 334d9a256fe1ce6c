"""What a store holds that a forked child must not use: :func:`forget_in_child`.

A connection (a socket, a SQLite file handle) of the parent is not the child's, and a lock a
parent's thread held at the fork is never released in the child. So a pool registers itself
here, and in a forked child its ``_after_fork_in_child`` runs before any of the child's own
code (``os.register_at_fork``): no operation needs to ask for the pid (a system call) to find
out that it runs in a child.

A holder may also have ``_before_fork`` and ``_after_fork_in_parent``, called in the forking
thread around the fork: SQLite's store waits there until none of its connections is in use,
because SQLite keeps the locks its connections hold in the process's memory, and a child copied
in the middle of a statement would find the file's locks held forever (by connections that
exist only in its copy).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

__all__ = ["forget_in_child"]

_HOLDERS: "weakref.WeakSet[Any]" = weakref.WeakSet()


def forget_in_child(holder: Any) -> None:
    """Call ``holder._after_fork_in_child()`` in every child this process forks from now on, while
    ``holder`` lives (it forgets its parent's connections and makes fresh locks)."""
    _HOLDERS.add(holder)


def _call(method: str) -> None:
    for holder in list(_HOLDERS):
        call = getattr(holder, method, None)
        if call is not None:
            call()


def _before_fork() -> None:
    _call("_before_fork")


def _after_fork_in_parent() -> None:
    _call("_after_fork_in_parent")


def _after_fork_in_child() -> None:
    _call("_after_fork_in_child")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
