"""The nemesis's store faults on a replicated Redis or Valkey: failovers through its Sentinels.

The store is a :class:`tests.replicated.Replicated` topology (a primary, two replicas, three
Sentinels with ``down-after-milliseconds`` 1000); the instances reach it through a
``redis+sentinel://`` URL with ``replicas=2``. :class:`FailoverFaults` does one of these at a
time, each a sequence of steps the nemesis thread runs (:meth:`Nemesis.schedule`), so that
instance faults go on meanwhile:

* ``failover-kill``: ``kill -9`` of the primary; once the Sentinels agree on the replica they
  promoted, the old primary is started again 1–5 s later as a replica of the new one
  (:meth:`Replicated.rejoin`);
* ``failover-stop``: SIGSTOP of the primary until the Sentinels promoted a replica, then 0.5–3 s
  more; after SIGCONT the old primary wakes up believing itself the primary, until the Sentinels
  demote it (about 8 s later) and it resyncs from the new one;
* ``replica-cut``: SIGSTOP of one replica for 1–6 s: no write can be confirmed by two replicas
  meanwhile, so nothing new starts and no lease is renewed.

Every duration is drawn when the fault begins (so a seed draws the same faults whatever the
timing). A fault ends once the topology is settled again (:meth:`Replicated.settled`: every
server streams from the primary every Sentinel names, no failover in progress); only then is it
written to ``nemesis.jsonl``, as a store restart is: stamped when it began (the kill, or the
SIGSTOP), with ``duration_ms`` until settled, the old primary's ``port`` (a cut replica's for
``replica-cut``), and for a failover the promotion: ``new_port``, ``promoted_ms`` after the
fault began, ``promoted_wall_ns`` and ``promoted_mono_ns`` (when a Sentinel first named the new
primary), then ``rejoined_ms`` or ``cont_ms``, and ``primary_port`` (the primary once settled: the
Sentinels may fail over once more meanwhile). A new fault waits until the last one ended and the
Sentinels may fail over again (twice their ``failover-timeout`` after the last failover began),
and needs :data:`MIN_BUDGET_S` before the quiet end, so every fault has ended by then.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import redis

if TYPE_CHECKING:
    from tests.replicated import Replicated
    from tests.servers import Server

    from .nemesis import Nemesis

__all__ = ["Fault", "FailoverFaults", "HOWS", "MIN_BUDGET_S"]

log = logging.getLogger("chaoslib.failover")

#: The faults, in the order the nemesis draws among them.
HOWS = ("failover-kill", "failover-stop", "replica-cut")
#: How long before the quiet end a fault may still begin: a failover-stop takes about 15 s to settle.
MIN_BUDGET_S = 30.0
#: How often the steps look at the Sentinels while they wait for a promotion or a settled topology.
POLL_S = 0.05
#: How long a promotion or a settle may take before the fault is given up as failed.
STEP_TIMEOUT_S = 60.0
#: The Sentinels start no new failover of a service within twice its failover-timeout of the last.
FAILOVER_SPACING_S = 10.0


def _stamp() -> Tuple[int, int]:
    """(wall_ns, mono_ns) of now."""
    return time.time_ns(), time.monotonic_ns()


@dataclasses.dataclass
class Fault:
    """One fault in progress: what it is, when it began, the server it hit, what it logs."""

    how: str
    at: Tuple[int, int]
    server: "Server"
    #: The seconds drawn at its start: the rejoin delay, the freeze after promotion, or the cut.
    delay_s: float
    fields: Dict[str, Any] = dataclasses.field(default_factory=dict)
    #: When the step that waits now (for a promotion, for a settled topology) began (monotonic).
    waiting_since: float = dataclasses.field(default_factory=time.monotonic)

    def ms_since(self) -> int:
        """Milliseconds since the fault began."""
        return (time.monotonic_ns() - self.at[1]) // 1_000_000


class FailoverFaults:
    """Failovers and cut replicas of a :class:`tests.replicated.Replicated` (see the module docstring)."""

    needs_unfrozen_instances = False
    #: A store fault weighs as much as a kill: the failovers are what this store is here for.
    weight = 3.0
    #: How long before the quiet end a fault may still begin, and how long after a failover began
    #: the next may (:data:`MIN_BUDGET_S`, :data:`FAILOVER_SPACING_S`).
    min_budget_s = MIN_BUDGET_S
    spacing_s = FAILOVER_SPACING_S

    def __init__(self, topology: "Replicated") -> None:
        self.topology = topology
        self._fault: Optional[Fault] = None
        self._nemesis: Optional["Nemesis"] = None
        self._not_before = 0.0
        self._began = 0

    def hows(self) -> List[str]:
        """The first fault is a ``failover-kill`` (every run has one); then any of :data:`HOWS`."""
        return list(HOWS) if self._began else ["failover-kill"]

    def ready(self, budget_s: float) -> bool:
        """Whether no fault is in progress, the Sentinels may fail over again, and ``budget_s`` is enough."""
        return self._fault is None and time.monotonic() >= self._not_before and budget_s >= self.min_budget_s

    def apply(self, how: str, rng: random.Random, budget_s: float, nemesis: "Nemesis") -> None:
        """Begin fault ``how``; the nemesis thread carries out its next steps and logs it once it ended."""
        if how not in HOWS:
            raise ValueError(f"unknown failover fault {how!r}: expected one of {', '.join(HOWS)}")
        self._nemesis = nemesis
        primary = self.topology.primary()
        if how == "replica-cut":
            replicas = [s for s in self.topology.servers if s is not primary and s.running]
            server = rng.choice(replicas)
            delay = rng.uniform(1.0, 6.0)
        else:
            server = primary
            delay = rng.uniform(1.0, 5.0) if how == "failover-kill" else rng.uniform(0.5, 3.0)
        self._began += 1
        if how == "failover-kill":
            fault = Fault(how, _stamp(), server, delay)
            server.kill()
        else:
            server.freeze()
            fault = Fault(how, _stamp(), server, delay)
        self._fault = fault
        log.info("nemesis: %s of %s", how, server.port)
        if how == "replica-cut":
            nemesis.schedule(delay, self._cont)
        else:
            self._not_before = time.monotonic() + self.spacing_s
            self._after_failure(fault, rng, nemesis)

    def _after_failure(self, fault: Fault, rng: random.Random, nemesis: "Nemesis") -> None:
        """The next step once the primary failed: here the Sentinels promote a replica on their own,
        so the nemesis watches for it (:meth:`_await_promotion`)."""
        nemesis.schedule(POLL_S, self._await_promotion)

    @staticmethod
    def _note_promotion(fault: Fault, port: int) -> None:
        """Log the promotion of the server on ``port``: its port, and when, since the fault began."""
        wall_ns, mono_ns = _stamp()
        fault.fields.update(new_port=port, promoted_ms=fault.ms_since(), promoted_wall_ns=wall_ns,
                            promoted_mono_ns=mono_ns)  # fmt: skip

    # -- the steps, in the nemesis thread ----------------------------------------------------

    def _await_promotion(self) -> None:
        """Until the Sentinels agree on a primary other than the old one; then the rejoin or SIGCONT, later."""
        fault, nemesis = self._fault, self._nemesis
        if fault is None or nemesis is None:
            return
        try:
            ports = self.topology.named_primaries(timeout=0.5)
        except redis.RedisError:
            ports = set()
        others = ports - {fault.server.port}
        if others and "new_port" not in fault.fields:
            self._note_promotion(fault, min(others))
        if len(ports) == 1 and others:
            nemesis.schedule(fault.delay_s, self._rejoin if fault.how == "failover-kill" else self._cont)
        elif time.monotonic() - fault.waiting_since > STEP_TIMEOUT_S:
            raise RuntimeError(f"{fault.how}: no replica of {fault.server.port} promoted within {STEP_TIMEOUT_S} s")
        else:
            nemesis.schedule(POLL_S, self._await_promotion)

    def _rejoin(self) -> None:
        """Start the killed primary again as a replica of the new one."""
        fault, nemesis = self._fault, self._nemesis
        assert fault is not None and nemesis is not None
        self._rejoin_now(fault)
        nemesis.schedule(POLL_S, self._await_settled)

    def _cont(self) -> None:
        """Wake the frozen server up (SIGCONT)."""
        fault, nemesis = self._fault, self._nemesis
        assert fault is not None and nemesis is not None
        self._cont_now(fault)
        nemesis.schedule(POLL_S, self._await_settled)

    def _await_settled(self) -> None:
        """Until the topology is settled; then the fault is logged and over."""
        fault, nemesis = self._fault, self._nemesis
        assert fault is not None and nemesis is not None
        if self.topology.settled():
            self._end(fault, nemesis)
        elif time.monotonic() - fault.waiting_since > STEP_TIMEOUT_S:
            raise RuntimeError(f"{fault.how}: the topology did not settle within {STEP_TIMEOUT_S} s")
        else:
            nemesis.schedule(POLL_S * 2, self._await_settled)

    def _end(self, fault: Fault, nemesis: "Nemesis") -> None:
        """Log the fault (stamped when it began, lasting until now) and let the next one begin."""
        self._fault = None
        extra = dict(fault.fields)
        action = "replica-cut"
        if fault.how != "replica-cut":
            primary = self.topology.primary().port
            extra.update(how=fault.how.split("-", 1)[1], primary_port=primary)
            extra.setdefault("new_port", None if primary == fault.server.port else primary)
            # a freeze healed at the end before any promotion is no failover
            action = "failover" if extra["new_port"] is not None else "primary-stop"
        nemesis.record(action, None, None, at=fault.at, port=fault.server.port, duration_ms=fault.ms_since(), **extra)

    def heal(self) -> None:
        """Finish the fault in progress at once (SIGCONT, the rejoin), wait until the topology settled, log it."""
        fault, nemesis = self._fault, self._nemesis
        if fault is None:
            return
        if fault.how != "failover-kill" and "cont_ms" not in fault.fields:
            self._cont_now(fault)
        if fault.how == "failover-kill" and not fault.server.running:
            self.topology.wait_failover(fault.server, timeout=STEP_TIMEOUT_S)
            self._rejoin_now(fault)
        self.topology.wait_settled(time.monotonic() + STEP_TIMEOUT_S)
        self._end_after_heal(fault, nemesis)

    def _end_after_heal(self, fault: Fault, nemesis: Optional["Nemesis"]) -> None:
        """Log a fault :meth:`heal` finished (unless the nemesis's log is closed: the run is over)."""
        if nemesis is not None:
            try:
                self._end(fault, nemesis)
            except ValueError as exc:
                log.warning("nemesis: %s ended after its log closed: %s", fault.how, exc)
        self._fault = None

    def _rejoin_now(self, fault: Fault) -> None:
        self.topology.rejoin(fault.server)
        fault.fields["rejoined_ms"] = fault.ms_since()
        fault.waiting_since = time.monotonic()

    def _cont_now(self, fault: Fault) -> None:
        fault.fields["cont_ms"] = fault.ms_since()
        fault.server.thaw()
        fault.waiting_since = time.monotonic()
