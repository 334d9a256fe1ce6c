"""lease_margin_ms between real processes: a runner cut off from its store, then starved of CPU
(SIGSTOP) for half the margin just before its local deadline, still aborts before its backup starts.

A runner and a backup share a job (lease 600 ms, heartbeats every 100 ms, a
200 ms margin). Right after a renewal of the runner's lease shows in the
store, its link to the store is cut:

* Redis, Valkey, PostgreSQL: each worker reaches the server through a
  chaos TCP proxy of its own (``benchmarks/chaoslib/proxy.py``); the runner's
  proxy drops every byte from then on (``blackhole``), the backup's works;
* Redis Cluster (no proxy can sit in front of a cluster's nodes): each
  worker connects as a user of its own; the runner's user is turned off and
  its connections killed on every node, so its calls fail;
* SQLite: every write to the file is held back (its write lock), the
  backup's too, until the stored lease ended; then writes go again and the
  backup can take over. Held back, a worker's write gives up after
  :data:`GIVE_UP_MS` and is tried again.

The runner's local deadline is ``lease_ms - lease_margin_ms`` after that
renewal was sent, so at most the margin before the stored lease end ``E``:
the runner is SIGSTOPped :data:`LEAD_MS` before ``E - margin`` for half the
margin, then SIGCONTed (:data:`CONFIRM_MS` after the renewal showed, so that
its answer reached the runner). Every time compared is the wall clock of
this one host (the workers' ``t`` stamps, the store's lease end, the
signals' sending).

The control, with ``lease_margin_ms=0``: the same starvation makes the
runner abort after its stored lease ended, when a backup may already run.
It compares with the lease end, not with a backup's start: whether a
backup's check (every one to two heartbeats) comes before the runner
wakes up is a matter of chance, so that order could not be asserted.
"""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack
from typing import Any, Callable, Dict, List

import pytest

from leasecron import Run, Store
from tests.chaos import BENCHMARKS  # noqa: F401 - puts benchmarks/ on sys.path: chaoslib
from tests.helpers import wait_for

from .harness import Cluster, Event, Worker, first_run, now_ms

from chaoslib.proxy import FaultyProxy  # noqa: E402, I001 - from benchmarks/

pytestmark = pytest.mark.processes

LEASE_MS = 600
HEARTBEAT_MS = 100
MARGIN_MS = 200
#: How long the runner is starved: half the margin.
STOP_MS = MARGIN_MS // 2
#: How long before its deadline's latest time the runner is stopped (the renewal's trip to the store
#: and this test's own wake-up fit in it).
LEAD_MS = 40
#: How long after a renewal shows in the store its link is cut: the answer has reached the runner
#: (cut between the two, the runner would count from the renewal before), the next renewal is due later.
CONFIRM_MS = 30
EVERY_S = 2.0
#: The handler's work: longer than a lease, so the runner is still working when it is cut off.
WORK_S = 1.2
#: How long a held-back SQLite write waits before it gives up (then it is tried again): a backup's
#: takeover claim held back until the lease ended would hold its new lease from when it was sent,
#: and lose it at once.
GIVE_UP_MS = 100


class Link:
    """The workers' ways to the store, and the cut of one of them."""

    def __init__(self, backend: Any, stack: ExitStack) -> None:
        self.backend = backend
        self.proxies: Dict[str, FaultyProxy] = {}
        self.blocker = backend.write_blocker() if backend.name == "sqlite" else None
        self.acl = _Users(backend, stack) if backend.name == "redis-cluster" else None
        if self.blocker is not None:
            stack.callback(self.blocker.close)
        self._stack = stack

    def url(self, runner: str) -> str:
        """The URL ``runner`` uses: through a proxy of its own, as a user of its own, or the file."""
        if self.blocker is not None:  # a held-back write gives up soon, and is tried again
            return str(self.backend.url_giving_up_after(GIVE_UP_MS))
        if self.acl is not None:
            return self.acl.url(runner)
        url = str(self.backend.url())
        host_port = url.split("://", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        proxy = self._stack.enter_context(FaultyProxy(host, int(port), name=f"proxy-{runner}"))
        self.proxies[runner] = proxy
        return url.replace(host_port, f"127.0.0.1:{proxy.port}", 1)

    def cut(self, runner: str) -> None:
        """Cut ``runner`` off the store (SQLite: every worker's writes)."""
        if self.blocker is not None:
            self.blocker.take()
        elif self.acl is not None:
            self.acl.cut(runner)
        else:
            self.proxies[runner].blackhole()

    def after_lease_end(self) -> None:
        """The stored lease ended: SQLite's writes go again (the backup's takeover)."""
        if self.blocker is not None:
            self.blocker.give_back()


class _Users:
    """A Redis Cluster user per worker on every node; a cut turns the user off and kills its
    connections, so the worker's calls fail (its connections are refused) and the other's go on."""

    def __init__(self, backend: Any, stack: ExitStack) -> None:
        import redis

        self.backend = backend
        self.clients = [redis.Redis(host=host, port=port) for host, port in backend.nodes()]
        self.users: List[str] = []
        stack.callback(self.close)

    def _each(self, *command: str) -> None:
        for client in self.clients:
            client.execute_command(*command)

    def url(self, runner: str) -> str:
        user = f"{self.backend.namespace}-{runner}"
        self.users.append(user)
        self._each("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all")
        return str(self.backend.url()).replace("redis://", f"redis://{user}:pw@", 1)

    def cut(self, runner: str) -> None:
        user = f"{self.backend.namespace}-{runner}"
        self._each("ACL", "SETUSER", user, "off")
        self._each("CLIENT", "KILL", "USER", user)

    def close(self) -> None:
        for user in self.users:
            self._each("ACL", "DELUSER", user)
        for client in self.clients:
            client.close()


def _stored(store: Store, job: str, slot_ms: int) -> Run:
    run = store.get_run(job, slot_ms)
    assert run is not None, slot_ms
    return run


def _sleep_until(wall_ms: float) -> None:
    """Wait until the wall clock reads ``wall_ms`` (a point of the scenario, not a condition)."""
    left = (wall_ms - time.time_ns() / 1e6) / 1000
    if left > 0:
        time.sleep(left)


def _starve(
    cluster: Cluster, link: Link, store: Store, victim: Worker, slot_ms: int, margin_ms: int
) -> Dict[str, float]:
    """Cut ``victim`` off right after a renewal of its lease was stored, then SIGSTOP it for
    :data:`STOP_MS` from :data:`LEAD_MS` before its deadline's latest time; the times of it."""
    claimed = _stored(store, cluster.job, slot_ms).lease_end_ms
    wait_for(
        lambda: _stored(store, cluster.job, slot_ms).lease_end_ms != claimed,
        timeout=3,
        interval=0.001,
        message="no heartbeat renewed the lease",
    )
    _sleep_until(now_ms() + CONFIRM_MS)  # the renewal's answer reaches the runner: its deadline moves on
    link.cut(victim.runner)
    cut = now_ms()
    lease_end = _stored(store, cluster.job, slot_ms).lease_end_ms
    _sleep_until(lease_end - margin_ms - LEAD_MS)
    stopped = victim.send(signal.SIGSTOP)
    _sleep_until(stopped + STOP_MS)
    continued = victim.send(signal.SIGCONT)
    return {"cut": cut, "lease_end": lease_end, "stopped": stopped, "continued": continued}


def _one(cluster: Cluster, runner: str, event: str, slot_ms: int, timeout: float = 5.0) -> Event:
    return cluster.wait_event(
        lambda e: e["event"] == event and e["runner"] == runner and e.get("slot_ms") == slot_ms,
        timeout=timeout,
        message=f"({event} of {runner} for slot {slot_ms})",
    )


def _start(cluster: Cluster, link: Link, names: List[str], margin_ms: int) -> None:
    for name in names:
        cluster.start(
            name,
            url=link.url(name),
            every=EVERY_S,
            work=WORK_S,
            lease_ms=LEASE_MS,
            heartbeat_ms=HEARTBEAT_MS,
            lease_margin_ms=margin_ms,
        )
    for name in names:
        cluster.wait_event(lambda e, n=name: e["event"] == "ready" and e["runner"] == n, timeout=15)


def _check_starved_at_its_deadline(lost: Event, times: Dict[str, float], describe: Callable[[], str]) -> None:
    """The runner was stopped before its deadline: it could only give up once continued."""
    assert lost["t"] >= times["continued"] - 5, (
        f"the runner gave up at {lost['t']}, before it was continued at {times['continued']}: the SIGSTOP came"
        f" after its deadline, the test starved nothing ({times})\n{describe()}"
    )


def test_a_runner_cut_off_and_starved_for_half_the_margin_aborts_before_its_backup_starts(
    process_backend: Any, cluster: Cluster
) -> None:
    """The margin holds between processes: the runner's handler sees its abort (``lost``,
    unrenewed) before the backup's handler starts the slot, and the slot completes once."""
    with ExitStack() as stack:
        link = Link(process_backend, stack)
        _start(cluster, link, ["m1", "m2"], MARGIN_MS)
        first = first_run(cluster, EVERY_S)
        slot_ms, runner = first["slot_ms"], first["runner"]
        backup = "m2" if runner == "m1" else "m1"
        store = process_backend.open()
        times = _starve(cluster, link, store, cluster.workers[runner], slot_ms, MARGIN_MS)
        _sleep_until(times["lease_end"] + 1)
        link.after_lease_end()
        started = cluster.wait_event(
            lambda e: e["event"] == "handler-start" and e["slot_ms"] == slot_ms and e["attempt"] == 2,
            timeout=5,
            message="(the backup's takeover)",
        )
        lost = _one(cluster, runner, "lost", slot_ms)
        aborted = _one(cluster, runner, "aborted", slot_ms)
        _check_starved_at_its_deadline(lost, times, cluster.describe)
        assert lost["reason"] == "unrenewed" and aborted["reason"] == "lost", (lost, aborted)
        assert started["runner"] == backup, started
        gap = started["t"] - aborted["t"]
        assert aborted["t"] < started["t"] and lost["t"] < started["t"], (
            f"the runner aborted {-gap} ms after its backup started ({times})\n{cluster.describe()}"
        )
        assert aborted["t"] < times["lease_end"], (aborted["t"] - times["lease_end"], times)
        print(f"{process_backend.name}: aborted {gap} ms before the backup started, {times['lease_end'] - aborted['t']}"
              " ms before the stored lease end")  # fmt: skip
        _one(cluster, backup, "success", slot_ms, timeout=2 * (WORK_S + 5))
        run = _stored(store, cluster.job, slot_ms)
        # once: the backup's attempt 2, or on a busy host a later one of its (each attempt's lease
        # is held by its own deadline); the runner never finishes
        assert (run.status, run.runner) == ("success", backup) and run.attempt >= 2, f"{run}\n{cluster.describe()}"
        assert [e["runner"] for e in cluster.where(event="success", slot_ms=slot_ms)] == [backup], cluster.describe()
        assert cluster.where(event="handler-end", runner=runner, slot_ms=slot_ms) == [], cluster.describe()


def test_control_without_a_margin_the_same_starvation_aborts_after_the_lease_ended(
    process_backend: Any, cluster: Cluster
) -> None:
    """With ``lease_margin_ms=0``, the runner starved the same way gives up after its stored lease
    ended, when a backup may already have started the slot."""
    with ExitStack() as stack:
        link = Link(process_backend, stack)
        _start(cluster, link, ["c1"], 0)
        first = first_run(cluster, EVERY_S)
        slot_ms = first["slot_ms"]
        store = process_backend.open()
        times = _starve(cluster, link, store, cluster.workers["c1"], slot_ms, 0)
        lost = _one(cluster, "c1", "lost", slot_ms)
        aborted = _one(cluster, "c1", "aborted", slot_ms)
        _check_starved_at_its_deadline(lost, times, cluster.describe)
        assert lost["reason"] == "unrenewed", lost
        assert aborted["t"] > times["lease_end"], (aborted["t"] - times["lease_end"], times)
        link.after_lease_end()
