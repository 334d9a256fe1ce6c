"""DelegatingStore: the whole contract suite again (the rules, the controls, the attempts, batches), through a
DelegatingStore around every backend's store; and what the wrapper itself promises (every operation
forwarded to the inner store's protected method, the arguments checked once, kind, repr, close, a
subclass that observes calls)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

import leasecron.stores.base
from leasecron import Claim, ConfigError, LeaseCron, Store
from leasecron.announcements import Announcement
from leasecron.stores import ClaimRequest, DelegatingStore
from tests.conftest import BACKENDS, Backend
from tests.engine.support import FAST, HOURLY, CATCH_UP_HOUR, Recorder

# The contract suite, collected again in this module: with the ``backend`` fixture below, each of its
# tests gets stores opened through a DelegatingStore.
from tests.stores.test_contract import *  # noqa: F401,F403,E402
from tests.stores.test_controls import *  # noqa: F401,F403,E402
from tests.stores.test_attempts import *  # noqa: F401,F403,E402
from tests.stores.test_batch import *  # noqa: F401,F403,E402
from tests.stores.test_schedules import *  # noqa: F401,F403,E402
from tests.stores.test_instances import *  # noqa: F401,F403,E402


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


#: The public operations of the contract: Store's own methods, which check their arguments and call
#: the protected method of the same name.
#: An announcement that the delegating store passes on.
SAID = Announcement("r", "host", 1, "0.3.0")

OPERATIONS = [
    "claim", "heartbeat", "finish", "release", "pause", "resume", "job_state", "job_states", "request_run",
    "pending_requests", "get_run", "unfinished", "runs", "jobs", "set_schedule", "stored_schedule",
    "schedule_changes", "announce", "withdraw", "instances", "record_return",
]  # fmt: skip


def test_every_operation_is_forwarded_and_the_public_methods_are_the_contracts() -> None:
    """DelegatingStore defines every abstract method of Store itself (the protected operations,
    now_ms, close) and the check helpers; its public operations are Store's own."""
    assert not DelegatingStore.__abstractmethods__
    assert {f"_{name}" for name in OPERATIONS} | {"now_ms", "close"} == set(Store.__abstractmethods__)
    for name in sorted(Store.__abstractmethods__) + ["server_version", "durability_warnings", "replication"]:
        assert name in vars(DelegatingStore), name
        assert inspect.signature(getattr(DelegatingStore, name)) == inspect.signature(getattr(Store, name)), name
    for name in OPERATIONS + ["claim_many"]:
        assert getattr(DelegatingStore, name) is getattr(Store, name), name
    assert "_claim_many" in vars(DelegatingStore)  # a batch goes to the inner store's own _claim_many
    assert "_poll" in vars(DelegatingStore)  # and a poll to the inner store's own _poll
    assert "_poll_announcing" in vars(DelegatingStore)  # with an announcement too
    assert DelegatingStore.poll is Store.poll


class _Answers(Store):
    """A store of the user's kind: each protected method returns a value of its own, to see it passed on."""

    kind = "answers"

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Tuple[Any, ...]]] = []
        self.closed = 0

    def _called(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def now_ms(self) -> int:
        self._called("now_ms")
        return 42

    def _claim(self, request: ClaimRequest) -> Claim:
        self._called("claim", request)
        return "claim-answer"  # type: ignore[return-value]

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        self._called("heartbeat", job, slot_ms, token, lease_ms)
        return False

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Any) -> bool:
        self._called("finish", job, slot_ms, token, status, error)
        return True

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        self._called("release", job, slot_ms, token)
        return False

    def _record_return(self, *args: Any) -> bool:
        self._called("record_return", *args)
        return True

    def _pause(self, job: str, by: str, note: Any) -> Any:
        self._called("pause", job, by, note)
        return "paused-state"

    def _resume(self, job: str, by: str) -> Any:
        self._called("resume", job, by)
        return "resumed-state"

    def _job_state(self, job: str) -> Any:
        self._called("job_state", job)
        return "a-state"

    def _job_states(self) -> Any:
        self._called("job_states")
        return ["states"]

    def _request_run(self, job: str, by: str, max_late_ms: int) -> Any:
        self._called("request_run", job, by, max_late_ms)
        return "a-request"

    def _pending_requests(self) -> Any:
        self._called("pending_requests")
        return ["pending"]

    def _get_run(self, job: str, slot_ms: int) -> Any:
        self._called("get_run", job, slot_ms)
        return "a-run"

    def _unfinished(self, job: str) -> Any:
        self._called("unfinished", job)
        return ["unfinished"]

    def _runs(self, job: str, limit: int) -> Any:
        self._called("runs", job, limit)
        return ["runs"]

    def _set_schedule(self, *args: Any) -> Any:
        self._called("set_schedule", *args)
        return "a-schedule"

    def _stored_schedule(self, job: str) -> Any:
        self._called("stored_schedule", job)
        return "stored"

    def _schedule_changes(self, since: int) -> Any:
        self._called("schedule_changes", since)
        return "changes"

    def _jobs(self) -> List[str]:
        self._called("jobs")
        return ["j"]

    def _announce(self, announcement: Any) -> None:
        self._called("announce", announcement)

    def _withdraw(self, runner: str) -> None:
        self._called("withdraw", runner)

    def _instances(self) -> Any:
        self._called("instances")
        return ["live"]

    def server_version(self) -> str:
        return "Answers 1.2"

    def durability_warnings(self) -> List[str]:
        return ["keep it on disk"]

    def replication(self) -> List[str]:
        return ["copied twice"]

    def close(self) -> None:
        self.closed += 1

    def __repr__(self) -> str:
        return "<Answers>"


def test_each_call_is_passed_on_with_its_arguments_and_answer() -> None:
    """Every method reaches the inner store with the same arguments (a claim's as one ClaimRequest),
    and its answer comes back unchanged."""
    inner = _Answers()
    store = DelegatingStore(inner)
    assert store.now_ms() == 42
    assert store.claim("j", 7, runner="r", reason="takeover", lease_ms=9, max_attempts=2, max_late_ms=3,
                       overlap="allow", history_size=4, token="t0") == "claim-answer"  # fmt: skip
    assert store.heartbeat("j", 7, "t", 5) is False
    assert store.finish("j", 7, "t", "failed", "boom") is True
    assert store.release("j", 7, "t") is False
    assert store.pause("j", by="ops", note="why") == "paused-state"
    assert store.resume("j", by="ops") == "resumed-state"
    assert store.job_state("j") == "a-state"
    assert store.job_states() == ["states"]
    assert store.request_run("j", by="ops", max_late_ms=5) == "a-request"
    assert store.pending_requests() == ["pending"]
    assert store.get_run("j", 7) == "a-run"
    assert store.unfinished("j") == ["unfinished"]
    assert store.runs("j", 3) == ["runs"]
    assert store.jobs() == ["j"]
    assert store.set_schedule("j", by="ops", schedule=30, task="t", kwargs={"a": 1}) == "a-schedule"
    assert store.stored_schedule("j") == "stored"
    assert store.schedule_changes(3) == "changes"
    assert store.announce(SAID) is None
    store.withdraw("r")
    assert store.instances() == ["live"]
    assert store.server_version() == "Answers 1.2"
    assert store.durability_warnings() == ["keep it on disk"]
    assert store.replication() == ["copied twice"]
    assert store.record_return("j", 7, 2, "r", 9, "failed", "late") is True
    assert inner.calls == [
        ("now_ms", ()),
        ("claim", (ClaimRequest("j", 7, "r", "takeover", 9, 2, 3, "allow", 4, "t0"),)),
        ("heartbeat", ("j", 7, "t", 5)),
        ("finish", ("j", 7, "t", "failed", "boom")),
        ("release", ("j", 7, "t")),
        ("pause", ("j", "ops", "why")),
        ("resume", ("j", "ops")),
        ("job_state", ("j",)),
        ("job_states", ()),
        ("request_run", ("j", "ops", 5)),
        ("pending_requests", ()),
        ("get_run", ("j", 7)),
        ("unfinished", ("j",)),
        ("runs", ("j", 3)),
        ("jobs", ()),
        ("set_schedule", ("j", "ops", "stored", "30", None, "t", {"a": 1}, {})),
        ("stored_schedule", ("j",)),
        ("schedule_changes", (3,)),
        ("announce", (SAID,)),
        ("withdraw", ("r",)),
        ("instances", ()),
        ("record_return", ("j", 7, 2, "r", 9, "failed", "late")),
    ]
    # a batch reaches the inner store's _claim_many, whose default sends one _claim after the other
    inner.calls.clear()
    batch = [ClaimRequest("j", 7, "r"), ClaimRequest("k", 8, "r", reason="catch-up")]
    assert store.claim_many(batch) == ["claim-answer", "claim-answer"]
    assert inner.calls == [("claim", (batch[0],)), ("claim", (batch[1],))]
    # a poll reaches the inner store's _poll, whose default reads one after the other
    inner.calls.clear()
    polled = store.poll(5)
    assert (polled.requests, polled.schedules) == (["pending"], "changes")
    assert inner.calls == [("pending_requests", ()), ("schedule_changes", (5,))]
    # a poll with an announcement: the inner store's _poll_announcing, whose default announces first
    inner.calls.clear()
    store.poll(5, announce=SAID)
    assert inner.calls == [("announce", (SAID,)), ("pending_requests", ()), ("schedule_changes", (5,))]
    # the claim's defaults are the contract's; runs' limit is never negative
    inner.calls.clear()
    store.claim("j", 8, runner="r")
    store.finish("j", 8, "t", "success")
    store.pause("j", by="ops")
    store.request_run("j", by="ops")
    store.runs("j")
    store.runs("j", -5)
    assert inner.calls == [
        ("claim", (ClaimRequest("j", 8, "r", "schedule", 30_000, 3, 30_000, "skip", 100, None, 0),)),
        ("finish", ("j", 8, "t", "success", None)),
        ("pause", ("j", "ops", None)),
        ("request_run", ("j", "ops", 30_000)),
        ("runs", ("j", 20)),
        ("runs", ("j", 0)),
    ]


def test_the_arguments_are_checked_once_by_the_outermost_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through two wrappers a claim's arguments are checked once; a bad argument is refused with
    ConfigError naming it before any store is asked."""
    checked: List[ClaimRequest] = []
    check_claim = leasecron.stores.base.check_claim

    def counting(request: ClaimRequest) -> None:
        checked.append(request)
        check_claim(request)

    monkeypatch.setattr(leasecron.stores.base, "check_claim", counting)
    inner = _Answers()
    store = DelegatingStore(DelegatingStore(inner))
    assert store.claim("j", 7, runner="r") == "claim-answer"
    assert len(checked) == 1
    with pytest.raises(ConfigError, match="lease_ms"):
        store.claim("j", 7, runner="r", lease_ms=0)
    with pytest.raises(ConfigError, match="status"):
        store.finish("j", 7, "t", "done")
    with pytest.raises(ConfigError, match="note"):
        store.pause("j", by="ops", note=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_late_ms"):
        store.request_run("j", by="ops", max_late_ms=-1)
    with pytest.raises(ConfigError, match="by"):
        store.resume("j", by="")
    assert [name for name, _ in inner.calls] == ["claim"]


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


def test_a_refused_argument_raises_the_error_a_store_raises(backend: _Wrapping) -> None:
    """A refused argument raises the ConfigError any store raises, naming it."""
    store = backend.open()
    with pytest.raises(ConfigError, match="lease_ms"):
        store.claim("job", store.now_ms(), runner="r", lease_ms=0)


def test_wrapping_something_that_is_not_a_store_is_refused() -> None:
    """DelegatingStore(x) with x not a Store raises ConfigError naming it."""
    with pytest.raises(ConfigError, match="wraps a leasecron Store"):
        DelegatingStore("sqlite:///x.db")  # type: ignore[arg-type]


class _Counting(DelegatingStore):
    """What a benchmark or metrics wrapper does: override one protected method, call super()."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.claims: List[str] = []

    def _claim(self, request: ClaimRequest) -> Claim:
        answer = super()._claim(request)
        self.claims.append(f"{request.reason} -> {answer.outcome}")
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


def test_a_wrapper_that_changes_polls_sees_the_polls_that_carry_an_announcement() -> None:
    """A DelegatingStore that overrides _poll gets every poll, also one with an announcement (announced
    first); one that does not passes it to the inner store whole (its one round trip)."""

    class Seeing(DelegatingStore):
        def __init__(self, inner: Store) -> None:
            super().__init__(inner)
            self.polls: List[int] = []

        def _poll(self, since: int) -> Any:
            self.polls.append(since)
            return super()._poll(since)

    inner = _Answers()
    seeing = Seeing(inner)
    seeing.poll(3, announce=SAID)
    assert seeing.polls == [3]
    assert inner.calls == [("announce", (SAID,)), ("pending_requests", ()), ("schedule_changes", (3,))]
