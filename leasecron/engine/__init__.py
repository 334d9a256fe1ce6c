"""The engine: what makes a started :class:`~leasecron.LeaseCron` work, in threads.

A claim goes one way: the scheduler thread (:mod:`.scheduler`) finds a slot
due, :mod:`.claims` sends the claim to the store from the claim pool
(:mod:`.claim_pool`) and acts on the answer: ``won`` starts a live run
(:mod:`.live`, its handler's tries in :mod:`.tries`, on the threads of
:mod:`.workers`), ``running`` makes this instance a backup (:mod:`.backups`).
:mod:`.core` builds the parts and hands each the few others it needs.
"""

from .core import Engine

__all__ = ["Engine"]
