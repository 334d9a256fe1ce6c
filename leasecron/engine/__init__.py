"""The engine: what makes a started :class:`~leasecron.LeaseCron` work, in threads.

A claim goes one way: the scheduler thread finds a slot due (:mod:`.slots`),
its claim joins the pass's batch (:mod:`.batches`), the claim pool sends it
(:mod:`.claims`) and acts on the store's answer: ``won`` starts a live run
(:mod:`.live_runs`), ``running`` makes this instance a backup
(:mod:`.backups`). :mod:`.core` builds the parts, each given the few others it
needs (:mod:`.roles`); ``docs/design.rst``, "The engine", tells the rest.
"""

from .core import Engine

__all__ = ["Engine"]
