"""DelegatingStore: the whole contract suite again, through a DelegatingStore around every backend's
store; and what the wrapper itself promises (every Store method forwarded, kind, repr, close, a
subclass that observes calls)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

from leasecron import ConfigError, LeaseCron, Store
from leasecron.stores import DelegatingStore
from tests.conftest import BACKENDS, Backend
from tests.engine.support import FAST, HOURLY, CATCH_UP_HOUR, Recorder

# The contract suite, collected again in this module: with the ``backend`` fixture below, each of its
# tests gets stores opened through a DelegatingStore.
from tests.stores.test_contract import *  # noqa: F401,F403,E402


class _Wrapping:
    """A backend whose every store handle is a DelegatingStore around the real one."""

    def __init__(self, real: Backend) -> None:
        self.real = real
        self.name = real.name

    def open(self) -> Store:
        return DelegatingStore(self.real.open())

    def url(self) -> str:
        return self.real.url()


#: The wrapper only forwards calls, which no backend does differently: the suite runs again
#: through it on the in-process stores and one server store, not on all six (CI time).
WRAPPED_BACKENDS = ["memory", "sqlite", "redis"]


@pytest.fixture(params=WRAPPED_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Wrapping]:
    """A backend of ``WRAPPED_BACKENDS`` in turn, its stores opened through a DelegatingStore."""
    real = BACKENDS[request.param](tmp_path)
    yield _Wrapping(real)
    real.close()


def test_the_contract_tests_here_get_a_delegating_store(store: Store) -> None:
    """The ``store`` the contract tests of this module receive is a DelegatingStore around a real store."""
    assert type(store) is DelegatingStore
    assert not isinstance(store.inner, DelegatingStore) and isinstance(store.inner, Store)
    assert store.kind == store.inner.kind


def _public_methods(cls: type) -> List[str]:
    return sorted(
        name
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name not in ("__enter__", "__exit__")
    )


def test_every_store_method_is_forwarded_not_inherited() -> None:
    """DelegatingStore defines every public method of Store itself: none falls back to Store's default."""
    missing = [name for name in _public_methods(Store) if name not in vars(DelegatingStore)]
    assert missing == []
    assert not DelegatingStore.__abstractmethods__
    for name in _public_methods(Store):
        assert inspect.signature(getattr(DelegatingStore, name)) == inspect.signature(getattr(Store, name)), name


class _Answers(Store):
    """A store of the user's kind: each method returns a value of its own, to see it passed on."""

    kind = "answers"

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Tuple[Any, ...]]] = []
        self.closed = 0

    def _called(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def now_ms(self) -> int:
        self._called("now_ms")
        return 42

    def claim(self, job: str, slot_ms: int, **kwargs: Any) -> Any:  # type: ignore[override]
        self._called("claim", job, slot_ms, tuple(sorted(kwargs.items())))
        return "claim-answer"

    def heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        self._called("heartbeat", job, slot_ms, token, lease_ms)
        return False

    def finish(self, job: str, slot_ms: int, token: str, status: str, error: Any = None) -> bool:
        self._called("finish", job, slot_ms, token, status, error)
        return True

    def release(self, job: str, slot_ms: int, token: str) -> bool:
        self._called("release", job, slot_ms, token)
        return False

    def get_run(self, job: str, slot_ms: int) -> Any:
        self._called("get_run", job, slot_ms)
        return "a-run"

    def unfinished(self, job: str) -> Any:
        self._called("unfinished", job)
        return ["unfinished"]

    def runs(self, job: str, limit: int = 20) -> Any:
        self._called("runs", job, limit)
        return ["runs"]

    def jobs(self) -> List[str]:
        self._called("jobs")
        return ["j"]

    def server_version(self) -> str:
        return "Answers 1.2"

    def durability_warnings(self) -> List[str]:
        return ["keep it on disk"]

    def close(self) -> None:
        self.closed += 1

    def __repr__(self) -> str:
        return "<Answers>"


def test_each_call_is_passed_on_with_its_arguments_and_answer() -> None:
    """Every method reaches the inner store with the same arguments, and its answer comes back unchanged."""
    inner = _Answers()
    store = DelegatingStore(inner)
    assert store.now_ms() == 42
    assert store.claim("j", 7, runner="r", reason="takeover", lease_ms=9, max_attempts=2, max_late_ms=3,
                       overlap="allow", history_size=4) == "claim-answer"  # fmt: skip
    assert store.heartbeat("j", 7, "t", 5) is False
    assert store.finish("j", 7, "t", "failed", "boom") is True
    assert store.release("j", 7, "t") is False
    assert store.get_run("j", 7) == "a-run"
    assert store.unfinished("j") == ["unfinished"]
    assert store.runs("j", 3) == ["runs"]
    assert store.jobs() == ["j"]
    assert store.server_version() == "Answers 1.2"
    assert store.durability_warnings() == ["keep it on disk"]
    claim_args = (("history_size", 4), ("lease_ms", 9), ("max_attempts", 2), ("max_late_ms", 3),
                  ("overlap", "allow"), ("reason", "takeover"), ("runner", "r"))  # fmt: skip
    assert inner.calls == [
        ("now_ms", ()),
        ("claim", ("j", 7, claim_args)),
        ("heartbeat", ("j", 7, "t", 5)),
        ("finish", ("j", 7, "t", "failed", "boom")),
        ("release", ("j", 7, "t")),
        ("get_run", ("j", 7)),
        ("unfinished", ("j",)),
        ("runs", ("j", 3)),
        ("jobs", ()),
    ]
    # the claim's defaults are the contract's
    inner.calls.clear()
    store.claim("j", 8, runner="r")
    assert inner.calls == [("claim", ("j", 8, (("history_size", 100), ("lease_ms", 30_000), ("max_attempts", 3),
                                                ("max_late_ms", 30_000), ("overlap", "skip"), ("reason", "schedule"),
                                                ("runner", "r"))))]  # fmt: skip


def test_kind_repr_close_and_with_block_come_from_the_inner_store() -> None:
    """kind is the inner store's, repr shows both, close() and a with-block close the inner store once."""
    inner = _Answers()
    store = DelegatingStore(inner)
    assert store.kind == "answers"
    assert repr(store) == "<DelegatingStore <Answers>>"
    with store as entered:
        assert entered is store
    assert inner.closed == 1
    store.close()
    assert inner.closed == 2


def test_errors_of_the_inner_store_pass_through(backend: _Wrapping) -> None:
    """A refused argument raises the inner store's own error, unchanged."""
    store = backend.open()
    with pytest.raises(ConfigError, match="lease_ms"):
        store.claim("job", store.now_ms(), runner="r", lease_ms=0)


def test_wrapping_something_that_is_not_a_store_is_refused() -> None:
    """DelegatingStore(x) with x not a Store raises ConfigError naming it."""
    with pytest.raises(ConfigError, match="wraps a leasecron Store"):
        DelegatingStore("sqlite:///x.db")  # type: ignore[arg-type]


class _Counting(DelegatingStore):
    """What a benchmark or metrics wrapper does: override one method, call super()."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.claims: List[str] = []

    def claim(self, job: str, slot_ms: int, **kwargs: Any) -> Any:  # type: ignore[override]
        answer = super().claim(job, slot_ms, **kwargs)
        self.claims.append(f"{kwargs.get('reason', 'schedule')} -> {answer.outcome}")
        return answer


def test_a_subclass_sees_every_claim_of_a_running_instance(backend: _Wrapping) -> None:
    """A LeaseCron on a DelegatingStore subclass runs its job, and the subclass sees the engine's claims."""
    store = _Counting(backend.real.open())
    cron = LeaseCron(store, runner="a", catch_up_ms=CATCH_UP_HOUR, **FAST)
    rec = Recorder(cron)
    cron.add_job(lambda: None, HOURLY, name="job")
    cron.start()
    try:
        success = rec.wait("success", timeout=3)
    finally:
        cron.stop(timeout=1)
    assert store.claims == ["catch-up -> won"]
    run = backend.real.open().get_run("job", success.slot_ms or 0)
    assert run is not None and run.status == "success" and run.runner == "a"
