"""What a PostgreSQL primary's replication means for exactly once: the lines and warnings of ``leasecron check``.

The one idea: a failover loses nothing the old primary acknowledged only when each commit
waited for the standby that is promoted, so ``synchronous_standby_names`` names standbys,
``synchronous_commit`` is ``on`` or ``remote_apply``, and as many synchronous standbys stream as
the setting asks for. :class:`Replication` is what the server says (``replication`` in
``sql/postgres/queries.sql``, one statement); :meth:`Replication.lines` and
:meth:`Replication.warnings` say what it means. ``docs/replication.rst`` says the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

__all__ = ["Replication", "Standby", "required_standbys"]

#: ``[FIRST|ANY] num_sync (names...)``; without it, a list of names means ``FIRST 1``.
_NUM_SYNC = re.compile(r"^\s*(?:(FIRST|ANY)\s+)?(\d+)\s*\(", re.IGNORECASE)

#: The ``synchronous_commit`` values with which a commit is acknowledged before a synchronous
#: standby has it on disk (what each leaves out), when ``synchronous_standby_names`` is set.
_WEAK_COMMIT = {
    "off": "acknowledged before it is on disk anywhere",
    "local": "acknowledged without waiting for a standby",
    "remote_write": "acknowledged once the standby has written it, before it is on the standby's disk",
}


def required_standbys(standby_names: str) -> Tuple[str, int]:
    """How ``synchronous_standby_names`` chooses (``FIRST`` by priority, ``ANY`` a quorum), and
    how many standbys each commit waits for (0: none, the setting is empty)."""
    if not standby_names.strip():
        return "FIRST", 0
    found = _NUM_SYNC.match(standby_names)
    if found is None:  # a plain list of names: the first one that streams
        return "FIRST", 1
    return (found.group(1) or "FIRST").upper(), int(found.group(2))


@dataclass(frozen=True)
class Standby:
    """A standby as the primary's ``pg_stat_replication`` shows it (``None``: hidden from a role
    without ``pg_monitor`` or ``pg_read_all_stats``, or not reported yet)."""

    name: str
    address: Optional[str]
    state: Optional[str]
    sync_state: Optional[str]
    replay_lag_ms: Optional[float]

    @property
    def synchronous(self) -> bool:
        """Whether commits wait for it now (``sync``, or ``quorum`` under ``ANY``), and it streams."""
        return self.state == "streaming" and self.sync_state in ("sync", "quorum")

    def line(self) -> str:
        """``standby NAME at ADDRESS: STATE, sync_state X, replay lag Y``."""
        where = f" at {self.address}" if self.address else ""
        if self.state is None:
            return f"standby {self.name!r}{where}: its state is hidden from this role (grant it pg_monitor)"
        lag = "-" if self.replay_lag_ms is None else f"{self.replay_lag_ms:.1f} ms"
        risk = "" if self.sync_state in ("sync", "quorum") else " (commits do not wait for it)"
        return f"standby {self.name!r}{where}: {self.state}, sync_state {self.sync_state}{risk}, replay lag {lag}"


@dataclass(frozen=True)
class Replication:
    """A primary's replication: where the store's session is, the two settings, the standbys."""

    address: Optional[str]
    port: Optional[int]
    standby_names: str
    synchronous_commit: str
    standbys: Tuple[Standby, ...]

    @classmethod
    def from_row(cls, row: Tuple[Any, ...]) -> "Replication":
        """From the row of the ``replication`` query."""
        address, port, names, commit, standbys = row
        listed = tuple(Standby(str(s[0]), s[1], s[2], s[3], None if s[4] is None else float(s[4])) for s in standbys)
        return cls(address, None if port is None else int(port), str(names), str(commit), listed)

    def lines(self) -> List[str]:
        """One line per fact, for ``leasecron check``."""
        server = "a local socket" if self.address is None else f"{self.address}:{self.port}"
        method, number = required_standbys(self.standby_names)
        waits = f"each commit waits for {number} ({method})" if number else "no commit waits for a standby"
        lines = [
            f"primary {server} (the server this session reached)",
            f"synchronous_standby_names {self.standby_names!r}: {waits}",
            f"synchronous_commit {self.synchronous_commit}",
        ]
        lines += [standby.line() for standby in self.standbys] or ["no standby streams from this server"]
        return lines

    def warnings(self) -> List[str]:
        """Each way a failover could lose a claim or a renewal this primary acknowledged (and the
        missing standbys that make every write wait)."""
        method, number = required_standbys(self.standby_names)
        if number == 0:
            if not self.standbys:
                return []  # a server alone: nothing to fail over to
            return [
                f"no synchronous standby (synchronous_standby_names is empty): a failover to one of the"
                f" {len(self.standbys)} standby(s) can lose the last claims and renewals this server"
                " acknowledged, and a slot can run twice"
            ]
        warnings = []
        weak = _WEAK_COMMIT.get(self.synchronous_commit)
        if weak is not None:
            warnings.append(
                f"synchronous_commit is {self.synchronous_commit}: a commit is {weak}; a failover can lose"
                " the last claims and renewals this server acknowledged (set it to on or remote_apply)"
            )
        if all(standby.state is not None for standby in self.standbys):
            streaming = sum(standby.synchronous for standby in self.standbys)
            if streaming < number:
                warnings.append(
                    f"synchronous_standby_names asks for {number} synchronous standby(s) ({method}) and"
                    f" {streaming} stream(s) as one: every write waits until enough are back (claims and"
                    " heartbeats time out meanwhile)"
                )
        return warnings
