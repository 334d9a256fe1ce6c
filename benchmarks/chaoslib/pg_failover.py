"""The nemesis's store faults on a replicated PostgreSQL: failovers the harness carries out as an operator would.

The store is a :class:`tests.pg_replicas.PgPair` (a primary and one synchronous standby made with
``pg_basebackup``); the instances reach it through one multi-host URL with
``target_session_attrs=read-write``. PostgreSQL promotes nothing on its own: here the nemesis
plays the failover tool (Patroni, or the operator). :class:`PgFailoverFaults` reuses
:class:`~chaoslib.failover.FailoverFaults`'s steps and log lines, with three differences:

* after a ``failover-kill`` (``kill -9`` of every process of the primary) or a ``failover-stop``
  (SIGSTOP of every process of it), the standby is promoted (``pg_promote()``) 0.5–2 s later, the
  time a tool takes to decide the primary is gone;
* a frozen old primary is never woken as a primary: once the standby is promoted it is fenced
  (``kill -9`` while still frozen, as Patroni's watchdog or a STONITH would) and logged with
  ``fenced_ms``;
* the old primary comes back as the new primary's synchronous standby from a fresh base backup
  (``rejoined_ms``), on its old port, so the URL never changes. Until then the promoted primary
  commits alone: it has no standby to wait for.

``replica-cut`` freezes the standby for 1–6 s: every commit waits for it meanwhile, so no claim
is answered and no lease renewed until it wakes up (a call gives up at the store's timeout).
A fault is written to ``nemesis.jsonl`` once the pair streams synchronously again.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, List

from .failover import POLL_S, STEP_TIMEOUT_S, FailoverFaults, Fault

if TYPE_CHECKING:
    from tests.pg_replicas import PgPair
    from tests.pg_servers import PgServer

    from .nemesis import Nemesis

__all__ = ["PgFailoverFaults", "PgTopology"]

#: How long after the primary failed the standby is promoted (a failover tool's detection), in s.
DETECT_S = (0.5, 2.0)


class PgTopology:
    """A :class:`~tests.pg_replicas.PgPair` seen as :class:`~chaoslib.failover.FailoverFaults` sees a
    Sentinel topology: its servers, the primary the operator names, whether it is settled."""

    def __init__(self, pair: "PgPair") -> None:
        self.pair = pair

    @property
    def servers(self) -> List["PgServer"]:
        """The primary and the standby (when there is one)."""
        return [s for s in (self.pair.primary, self.pair.standby) if s is not None]

    def primary(self) -> "PgServer":
        """The primary: the promoted standby once a failover promoted it."""
        return self.pair.primary

    def rejoin(self, old: "PgServer") -> None:
        """Bring ``old`` (the failed primary, fenced) back as the synchronous standby."""
        assert old is self.pair.old_primary, f"{old!r} is not the failed primary"
        self.pair.rejoin()

    def settled(self) -> bool:
        """Whether the primary streams to its standby synchronously (and no failed primary is left)."""
        standby = self.pair.standby
        if standby is None or self.pair.old_primary is not None:
            return False
        try:
            return self.pair.standbys() == [(standby.name, "streaming", "sync")]
        except Exception:  # noqa: BLE001 - a server that does not answer is not settled
            return False

    def wait_settled(self, deadline: float) -> None:
        """Until :meth:`settled`; RuntimeError past ``deadline`` (monotonic)."""
        while not self.settled():
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the PostgreSQL pair did not settle: standbys {self.pair.standbys()}")
            time.sleep(POLL_S * 2)

    def stop(self) -> None:
        """Stop both servers and remove their directory."""
        self.pair.stop()


class PgFailoverFaults(FailoverFaults):
    """Failovers of a :class:`PgTopology`, the nemesis promoting and fencing (see the module docstring)."""

    #: A fault settles within about 10 s (promotion 0.5–2 s, rejoin 1–5 s later, a base backup).
    min_budget_s = 20.0
    #: No Sentinel here waits between failovers; the next fault only waits until the last settled.
    spacing_s = 0.0

    def __init__(self, topology: PgTopology) -> None:
        super().__init__(topology)  # type: ignore[arg-type]
        self.pg = topology

    def _after_failure(self, fault: Fault, rng: random.Random, nemesis: "Nemesis") -> None:
        """The operator promotes the standby once it decided the primary is gone."""
        nemesis.schedule(rng.uniform(*DETECT_S), self._promote)

    def _promote(self) -> None:
        """Promote the standby; the old primary is fenced and rejoins ``delay_s`` later."""
        fault, nemesis = self._fault, self._nemesis
        if fault is None or nemesis is None:
            return
        self._promote_now(fault)
        nemesis.schedule(fault.delay_s, self._fence_and_rejoin)

    def _fence_and_rejoin(self) -> None:
        """Fence the old primary (``kill -9``, if it is frozen), then it rejoins as the standby."""
        fault, nemesis = self._fault, self._nemesis
        assert fault is not None and nemesis is not None
        self._fence_now(fault)
        self._rejoin_now(fault)
        nemesis.schedule(POLL_S, self._await_settled)

    def heal(self) -> None:
        """Finish the fault in progress at once (thaw a cut standby; else promote, fence, rejoin),
        wait until the pair settled, log it."""
        fault, nemesis = self._fault, self._nemesis
        if fault is None:
            return
        if fault.how == "replica-cut":
            if "cont_ms" not in fault.fields:
                self._cont_now(fault)
        else:
            if "new_port" not in fault.fields:
                self._promote_now(fault)
            if "rejoined_ms" not in fault.fields:
                self._fence_now(fault)
                self._rejoin_now(fault)
        self.pg.wait_settled(time.monotonic() + STEP_TIMEOUT_S)
        self._end_after_heal(fault, nemesis)

    def _promote_now(self, fault: Fault) -> None:
        self.pg.pair.promote()
        self._note_promotion(fault, self.pg.pair.primary.port)

    def _fence_now(self, fault: Fault) -> None:
        if fault.how == "failover-stop" and fault.server.running:
            fault.server.kill()
            fault.fields["fenced_ms"] = fault.ms_since()
