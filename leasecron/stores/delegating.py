"""A store that passes every call on to another: the base of wrappers that observe calls.

:class:`DelegatingStore` implements the whole :class:`~leasecron.Store`
contract by calling the same method of an *inner* store, with the same
arguments, and returning its answer (or letting its exception through)
unchanged. A wrapper subclasses it and overrides only the methods it
watches, calling ``super()``::

    class TimedStore(DelegatingStore):
        def claim(self, job, slot_ms, **kwargs):
            began = time.perf_counter()
            try:
                return super().claim(job, slot_ms, **kwargs)
            finally:
                claim_seconds.observe(time.perf_counter() - began)

    cron = LeaseCron(TimedStore(open_store(url)))

The wrapper is the store the engine sees, so it sees every call an instance
makes. What it forwards: every contract method (``now_ms``, ``claim``,
``heartbeat``, ``finish``, ``release``, ``get_run``, ``unfinished``,
``runs``, ``jobs``, ``close``), the ``check`` helpers (``server_version``,
``durability_warnings``) and ``kind``. A backend's own attributes (say a
``RedisStore``'s ``client``) are not forwarded, so that a type checker still
catches a misspelt name: read them from :attr:`DelegatingStore.inner`.
``repr()`` shows the wrapper around the inner store's.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ..errors import ConfigError
from ..runs import SCHEDULE, Claim, Run
from .base import Store

__all__ = ["DelegatingStore"]


class DelegatingStore(Store):
    """Every :class:`~leasecron.Store` method passed on unchanged to ``inner``."""

    def __init__(self, inner: Store) -> None:
        if not isinstance(inner, Store):
            raise ConfigError(f"{type(self).__name__} wraps a leasecron Store, not {inner!r}")
        #: The store every call is passed on to.
        self.inner = inner
        self.kind = inner.kind

    def now_ms(self) -> int:
        """The inner store's clock."""
        return self.inner.now_ms()

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
        """The inner store's claim (``token`` is passed on only when given)."""
        given: Dict[str, str] = {} if token is None else {"token": token}
        return self.inner.claim(
            job,
            slot_ms,
            runner=runner,
            reason=reason,
            lease_ms=lease_ms,
            max_attempts=max_attempts,
            max_late_ms=max_late_ms,
            overlap=overlap,
            history_size=history_size,
            **given,
        )

    def heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        """The inner store's heartbeat."""
        return self.inner.heartbeat(job, slot_ms, token, lease_ms)

    def finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str] = None) -> bool:
        """The inner store's finish."""
        return self.inner.finish(job, slot_ms, token, status, error)

    def release(self, job: str, slot_ms: int, token: str) -> bool:
        """The inner store's release."""
        return self.inner.release(job, slot_ms, token)

    def get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        """The inner store's run of ``job`` at ``slot_ms``."""
        return self.inner.get_run(job, slot_ms)

    def unfinished(self, job: str) -> List[Run]:
        """The inner store's running runs of ``job``."""
        return self.inner.unfinished(job)

    def runs(self, job: str, limit: int = 20) -> List[Run]:
        """The inner store's runs of ``job``."""
        return self.inner.runs(job, limit)

    def jobs(self) -> List[str]:
        """The inner store's job names."""
        return self.inner.jobs()

    def server_version(self) -> str:
        """The inner store's server version."""
        return self.inner.server_version()

    def durability_warnings(self) -> List[str]:
        """The inner store's durability warnings."""
        return self.inner.durability_warnings()

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.inner!r}>"
