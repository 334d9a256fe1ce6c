"""The store contract: what every backend does, atomically, on its own clock.

A store is the one place where instances agree. Every operation is atomic
and compares lease ends with the store's own clock (``now_ms``), never with
the caller's. Users may write their own store by subclassing :class:`Store`;
the conformance suite in ``tests/stores/`` is the executable form of the
contract and can be pointed at any store.

The rules, in the words of ``docs/leases.txt``:

1. A claim for a run with no state wins and gets a lease.
2. A heartbeat extends the lease, only with the current token and only while
   the lease was not released.
3. A run whose lease ran out can be claimed as the next attempt, up to
   ``max_attempts``. If a newer run of the job starts first, the old one is
   marked interrupted instead.
4. Finish and release only work with the current token.
5. A new run is refused while an earlier run of the job has a live lease
   (``overlap="skip"``).
6. A new claim that arrives too late, by the store's clock, is refused.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import List, Optional, Type

from ..errors import ConfigError, shown
from ..runs import FINISH_STATUSES, REASONS, SCHEDULE, Claim, Run

__all__ = [
    "MAX_INT",
    "MAX_NAME_BYTES",
    "Store",
    "check_job_name",
    "check_text",
    "OVERLAP_MODES",
    "validate_claim_args",
    "validate_finish_args",
    "validate_heartbeat_args",
    "validate_token_args",
]

OVERLAP_MODES = ("skip", "allow")


class Store(abc.ABC):
    """A shared record of runs: the contract every backend fulfils.

    Every method may raise :class:`~leasecron.StoreError` (or its subclass
    :class:`~leasecron.StoreUnavailable` for failures worth retrying), raised
    ``from`` the driver's own exception.
    """

    #: The URL scheme(s) this store is opened with, for messages and ``check``.
    kind: str = "store"

    @abc.abstractmethod
    def now_ms(self) -> int:
        """The store's clock, in milliseconds since the Unix epoch.

        Every lease comparison inside the store uses this clock.
        """

    @abc.abstractmethod
    def claim(
        self,
        job: str,
        slot_ms: int,
        *,
        runner: str,
        reason: str = SCHEDULE,
        lease_ms: int = 30_000,
        max_attempts: int = 3,
        max_late_ms: int = 30_000,
        overlap: str = "skip",
        history_size: int = 100,
        token: Optional[str] = None,
    ) -> Claim:
        """Ask to run ``job``'s slot ``slot_ms``; decided atomically at ``now``.

        ``token`` (optional) is the token an attempt this claim wins gets,
        instead of a new random one. It makes a claim safe to send again
        when its answer was lost (a timeout after the store ran it): the
        caller makes one token per claim (:func:`~leasecron.stores.rules.new_token`)
        and sends it with every try of that claim, and never with another.

        * The run is running, its current attempt holds ``token`` and was
          claimed by ``runner``, and its lease was not released: ``won``
          with that same attempt (same number, token, runner, reason and
          start), its lease renewed to ``now + lease_ms``: the retry of a
          claim that won. This holds whatever the lease end (a lease that
          ran out but was not taken over is renewed, as a heartbeat with
          that token would), the claim's ``reason`` and the other runs of
          the job; nothing else changes.
        * No run for the slot: ``none`` for a takeover claim (which never
          creates a run); ``early`` if ``slot_ms > now + 10 s``; ``late`` if
          ``now - slot_ms > max_late_ms + 10 s`` or a newer slot of the job
          has a run; ``overlap`` if ``overlap="skip"`` and an earlier slot is
          running with a live lease (``run`` is that run); otherwise ``won``:
          attempt 1 with ``token`` (a new random one if not given) and
          ``lease_end = now + lease_ms``. Earlier runs found running with
          expired leases are marked ``interrupted``; finished runs beyond
          the newest ``history_size`` are pruned, except the newest run,
          running runs and runs whose slot lies within ``max_late_ms + 10 s``
          of now.
        * The run ended: ``done`` (also when it ended with ``token``).
        * The run is running with a live lease: ``running`` (also when its
          attempt holds ``token`` but another runner claimed it).
        * The run is running with an expired or released lease: if a newer
          slot has a run, or ``max_attempts`` attempts already ended by a dead
          runner (released attempts do not count), it is marked
          ``interrupted`` and the answer is ``done``; otherwise ``won``: the
          next attempt, with ``token``, ``runner`` and a new lease; but with
          a new random token if ``token`` is the token of the attempt it
          replaces (released, or claimed by another runner).

        No attempt is ever given the token of the current attempt of the run
        (tokens fence a runner that was only frozen). The store keeps no
        older attempt's token: an older token comes back only through a retry
        of the very claim whose lost answer won that attempt, so no runner
        ever held it before.
        """

    @abc.abstractmethod
    def heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        """Move the lease end to ``now + lease_ms``.

        Only with the current token, while the run is running and its lease
        was not released. Returns whether the lease was renewed.
        """

    @abc.abstractmethod
    def finish(
        self, job: str, slot_ms: int, token: str, status: str, error: Optional[str] = None
    ) -> bool:
        """Record the end of the current attempt: ``status`` is ``"success"`` or ``"failed"``.

        Only with the current token of a running run. Returns whether the
        run was finished.
        """

    @abc.abstractmethod
    def release(self, job: str, slot_ms: int, token: str) -> bool:
        """Hand the run over: set ``lease_end = now`` and record the hand-over.

        Only with the current token of a running run whose lease was not
        released already. A released attempt does not count against
        ``max_attempts``, and its lease can no longer be renewed. Returns
        whether the run was released.
        """

    @abc.abstractmethod
    def get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        """The stored run of ``job`` at ``slot_ms``, or ``None``."""

    @abc.abstractmethod
    def unfinished(self, job: str) -> List[Run]:
        """The runs of ``job`` whose status is ``running``, oldest slot first."""

    @abc.abstractmethod
    def runs(self, job: str, limit: int = 20) -> List[Run]:
        """The stored runs of ``job``, newest slot first, at most ``limit``."""

    @abc.abstractmethod
    def jobs(self) -> List[str]:
        """The names of the jobs that have stored runs, sorted."""

    def server_version(self) -> str:
        """The kind and version of the server behind the store, for ``leasecron check``.

        For example ``Redis 7.0.15``, ``Valkey 9.1.2`` or ``SQLite 3.40.1``. A
        store written by a user may keep this default.
        """
        return type(self).__name__

    def durability_warnings(self) -> List[str]:
        """What in the server's configuration can make it forget a lease, for ``leasecron check``.

        Empty when nothing is known to be wrong (the default).
        """
        return []

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's connections. The store is not used afterwards."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


#: The largest time or count a store accepts (2**50 ms is some 35 000 years):
#: every backend can add two of them exactly, Lua's doubles included.
MAX_INT = 2**50


#: The longest job name, in bytes of UTF-8: every store can key and index it
#: (PostgreSQL's btree index rows hold at most about 2.7 kB).
MAX_NAME_BYTES = 1024


def check_text(what: str, value: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``value`` is a string every store can
    keep: no NUL character, and no lone surrogate (it could not be encoded as UTF-8)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, not {shown(value)}")
    _require("\x00" not in value, f"{what} must not contain a NUL character: {shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{what} must be valid Unicode text, but has a lone surrogate at index {exc.start}: {shown(value)}"
        ) from None


def check_job_name(job: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``job`` is a job name every store
    accepts: a non-empty string without NUL or lone surrogates, at most
    :data:`MAX_NAME_BYTES` bytes in UTF-8."""
    if not isinstance(job, str) or job == "":
        raise ConfigError(f"job name must be a non-empty string, not {shown(job)}")
    check_text("job name", job)
    size = len(job.encode("utf-8"))
    _require(
        size <= MAX_NAME_BYTES,
        f"job name must be at most {MAX_NAME_BYTES} bytes in UTF-8, not {size}: {shown(job)}",
    )


def _check_int(name: str, value: object, minimum: int) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_INT,
        f"{name} must be an integer from {minimum} to 2**50, not {value!r}",
    )


def validate_claim_args(
    job: str,
    slot_ms: int,
    runner: str,
    reason: str,
    lease_ms: int,
    max_attempts: int,
    max_late_ms: int,
    overlap: str,
    history_size: int,
    token: Optional[str] = None,
) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad argument of a claim."""
    check_job_name(job)
    _check_int("slot_ms", slot_ms, 0)
    _require(isinstance(runner, str) and runner != "", f"runner must be a non-empty string, not {runner!r}")
    check_text("runner", runner)
    _require(reason in REASONS, f"reason must be one of {', '.join(REASONS)}, not {reason!r}")
    _check_int("lease_ms", lease_ms, 1)
    _check_int("max_attempts", max_attempts, 1)
    _check_int("max_late_ms", max_late_ms, 0)
    _require(overlap in OVERLAP_MODES, f"overlap must be 'skip' or 'allow', not {overlap!r}")
    _check_int("history_size", history_size, 0)
    if token is not None:
        _require(isinstance(token, str) and token != "", f"token must be a non-empty string or None, not {token!r}")
        check_text("token", token)


def validate_finish_args(
    job: str, slot_ms: int, token: str, status: str, error: Optional[str] = None
) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad argument of a finish."""
    validate_token_args(job, slot_ms, token)
    _require(status in FINISH_STATUSES, f"status must be 'success' or 'failed', not {status!r}")
    _require(error is None or isinstance(error, str), f"error must be a string or None, not {error!r}")
    if error is not None:
        check_text("error", error.replace("\x00", ""))  # a NUL is kept (or replaced) by the store


def validate_heartbeat_args(job: str, slot_ms: int, token: str, lease_ms: int) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad argument of a heartbeat."""
    validate_token_args(job, slot_ms, token)
    _check_int("lease_ms", lease_ms, 1)


def validate_token_args(job: str, slot_ms: int, token: str) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad job, slot or token."""
    check_job_name(job)
    _check_int("slot_ms", slot_ms, 0)
    check_text("token", token)
