"""Finishes: the ends of an instance's live runs, sent to the store together (rule 25).

A handler that returned (or raised) ends its run with a finish. Runs that
fall due together end together, so their finishes are gathered here and go
to the store in one round trip (``Store.finish_many``), each decided exactly
as it would be alone. There is no timer and no wait: the run thread whose
finish finds no send under way sends it itself, then what gathered while
that round trip was on its way, and so on until none is left (group commit,
as a database log does it); a run that ends meanwhile only adds its finish,
and its thread goes back to the pool. An idle instance sends each finish at
once, alone.

The thread that sends also does what follows each answer (the run's
``success`` or ``failed`` line and event). When a batch raises, each of its
finishes is sent again alone, on a worker of its own, and retried until its
run's local deadline, as any finish is (:meth:`Finishing.finish_alone`).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import List, Optional, Protocol

from ..events import error_text, log
from ..states import AbortReason, Status
from ..stores import Finish, Store
from .roles import Threads
from .tries import timed_out_text

__all__ = ["Finishes", "Finishing", "End", "end_of"]


@dataclasses.dataclass(frozen=True)
class End:
    """How a live run ends, once its handler returned: the event it emits (``success``, ``failed``
    or ``handover``; the first two are also the status it is finished with), the error recorded,
    the event's reason (``timeout``), and how long the handler took (s)."""

    event: str
    text: Optional[str]
    reason: Optional[str]
    took: float


def end_of(error: Optional[BaseException], timed_out_ms: Optional[int], took: float) -> End:
    """The end of a handler that raised ``error`` (None: it returned) after ``took`` seconds;
    ``timed_out_ms``: its ``timeout_ms`` when the attempt timed out, whatever the handler did then."""
    if timed_out_ms:
        return End(Status.FAILED, timed_out_text(timed_out_ms), AbortReason.TIMEOUT, took)
    if error is not None:
        return End(Status.FAILED, error_text(error), None, took)
    return End(Status.SUCCESS, None, None, took)


class Finishing(Protocol):
    """A live run whose handler returned, waiting for its finish (:class:`~leasecron.engine.live.LiveRun`)."""

    @property
    def finish(self) -> Finish:
        """The finish to send."""

    @property
    def finishing(self) -> bool:
        """Whether the finish still matters (the run was not lost meanwhile)."""

    def finished(self, recorded: bool) -> None:
        """The store's answer to the finish sent with others: whether it recorded it (False also
        when it was not sent: the run was lost meanwhile). The run ends."""

    def finish_alone(self) -> None:
        """The batch failed: send the finish alone, retried until the local deadline (a worker's task)."""


class Finishes:
    """Gathers the finishes of ``store``'s live runs and sends them together, on ``workers``."""

    def __init__(self, store: Store, workers: Threads) -> None:  # workers: for a finish sent again alone
        self._store = store
        self._workers = workers
        self._lock = threading.Lock()
        self._gathered: List[Finishing] = []
        self._sending = False  # a thread sends: a new finish joins its next batch

    def add(self, run: Finishing) -> None:
        """Send ``run``'s finish with the others gathered now: in this thread when no send is under
        way, else in the sending thread's next batch. Its :meth:`~Finishing.finished` follows."""
        with self._lock:
            self._gathered.append(run)
            if self._sending:
                return
            self._sending = True
        self._send_gathered()

    def _send_gathered(self) -> None:
        """Send what has gathered, in batches, until none is left."""
        try:
            while True:
                with self._lock:
                    batch, self._gathered = self._gathered, []
                    if not batch:
                        self._sending = False
                        return
                self._send(batch)
        except BaseException:  # a bug: the next finish starts a send again
            with self._lock:
                self._sending = False
            raise

    def _send(self, gathered: List[Finishing]) -> None:
        batch = []
        for run in gathered:
            if run.finishing:
                batch.append(run)
            else:  # lost meanwhile: never touched again
                run.finished(False)
        if not batch:
            return
        try:
            if len(batch) == 1:
                answers = [self._store.finish(*batch[0].finish)]
            else:
                answers = self._store.finish_many([run.finish for run in batch])
        except Exception as exc:  # noqa: BLE001 - each is sent again alone, and retried so
            if len(batch) > 1:
                log.info("leasecron: a batch of %d finishes failed (%s): sending each alone", len(batch), exc)
            for run in batch:
                self._workers.submit("leasecron-finish", run.finish_alone)
            return
        for run, recorded in zip(batch, answers):
            run.finished(recorded)
