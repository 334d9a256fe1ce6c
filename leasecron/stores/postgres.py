"""PostgresStore: the store contract on PostgreSQL, through psycopg2.

Each operation that writes is one statement calling a PL/pgSQL function of the migrations
(``stores/sql/postgres/NNNN_*.sql``) on an autocommit connection: one round trip, one
transaction. The function takes a transaction-level advisory lock on the job, then reads
``clock_timestamp()``: the operations on one job are serialised across every instance, and every
lease is compared on the server's clock. The connections are
:mod:`leasecron.stores.pg_connections`; ``docs/design.rst`` (The stores) says the rest.

Stored schedules (migration 4): ``<table>_schedules`` holds each job's record, its cursor taken as
``MAX(cursor) + 1`` under a lock every change holds until it commits, so the cursors become
visible in their order; the claim reads the job's schedule version (rule 23) from the
``<table>_jobs`` row it reads anyway. ``poll`` is one statement, the requests and the changes
read in one snapshot.

Rolling upgrades: instances of an older release keep calling their own functions beside this
release's, which migration 4 adds without replacing one (``leasecron.stores.migrations``: a function
is never replaced in place). So an instance of 0.2, which computes its slots from the code's
schedule and cannot read a stored one, goes on claiming them through ``<table>_claim_v3``, which
knows nothing of rule 23 (as 0.1's claims know nothing of pauses): while a fleet is upgraded, a
job whose schedule was changed can start the slots of both schedules, one run each; once no
instance of 0.2 is left, only the stored one's. Fencing 0.2 off would mean replacing
``<table>_claim_v3`` in place by a call of ``<table>_claim_v4``; a plain version 0 there would also
fence 0.2 off a job for good once anything was ever stored for it, a reset too, and so silence it
on a fleet rolled back to 0.2.
"""

from __future__ import annotations

import json
import weakref
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..announcements import Announcement, LiveInstance, read_announcement
from ..controls import JobState, ManualRequest
from ..errors import ConfigError
from ..runs import MAX_ATTEMPTS_KEPT, Claim, Run
from ..states import RequestState
from ..stored import Overview, Poll, ScheduleChanges, StoredSchedule
from . import pg_rows, require
from .base import REQUESTS_KEPT, ClaimRequest, Finish, Store
from .pg_connections import DEFAULT_TIMEOUT_S, Cursor, Pool, pooled_cursor, with_defaults
from .pg_replication import Replication
from .queries import check_identifier, load_queries
from .pg_schema import SCHEMA_VERSION, PgSchema
from .pg_rows import batch_claim_of, changes_of, claim_of, job_state_of, no_nul, request_of, run_of, schedule_of
from .records import new_token
from .urls import masked_url

__all__ = ["PostgresStore", "SCHEMA_VERSION"]

#: The version whose schema holds pauses and requests; an older one (read as it is by a store
#: opened with ``create=False``) holds none.
_CONTROLS_VERSION = 3
#: The version whose schema holds stored schedules; an older one holds none.
_SCHEDULES_VERSION = 4
#: The schema version that first holds the instances' announcements.
_INSTANCES_VERSION = 5

#: The most claims of a batch decided in one statement: a statement holds the locks of its jobs
#: until it commits, so a batch of thousands is sent as several, each a short transaction.
BATCH_MAX = 256


class PostgresStore(Store):
    """The store contract in a PostgreSQL database (``postgresql://``, ``postgres://``).

    ``dsn`` is a libpq connection string or URL; or pass ``pool``, a psycopg2
    pool (``getconn``/``putconn``) whose connections the store uses in
    autocommit mode. ``schema`` and ``table`` name where the runs live, so
    several applications can share one database. ``max_connections`` bounds
    the store's own pool. ``timeout`` (seconds) bounds the wait for the
    answer to each statement on the store's own connections.

    ``create`` (default true): the first operation creates the schema and
    the tables, or migrates them to this release's version. With
    ``create=False`` the store creates and migrates nothing: an operation
    on a database without the schema or one of the tables raises
    :class:`~leasecron.StoreError` naming it (``schema.table``); a schema of
    an older version is read as it is (its runs as one attempt each, no
    pause, no request; an operation that writes may need the current
    version); a newer one is refused, as always. ``create`` may be
    changed before the first operation (the ``leasecron`` commands that only
    read switch it off for an app's store).
    """

    kind = "postgresql"

    def __init__(
        self,
        dsn: Optional[str] = None,
        *,
        pool: Any = None,
        schema: str = "public",
        table: str = "leasecron_runs",
        max_connections: int = 8,
        timeout: float = DEFAULT_TIMEOUT_S,
        create: bool = True,
    ) -> None:
        self._psycopg2 = require("psycopg2", extra="postgres", store="PostgresStore")
        if (dsn is None) == (pool is None):
            raise ConfigError("PostgresStore needs either a DSN or a psycopg2 pool (not both)")
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ConfigError(f"max_connections must be an integer >= 1, not {max_connections!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise ConfigError(f"timeout must be a number of seconds above 0 and at most 3600, not {timeout!r}")
        self._timeout_s = float(timeout)
        self.create = create
        # PostgreSQL folds unquoted names to lower case; so do we, to find them again.
        self.schema = check_identifier(schema, "schema").lower()
        self.table = check_identifier(table).lower()
        self._q = load_queries("postgres", schema=self.schema, table=self.table)
        if pool is not None:
            if not (hasattr(pool, "getconn") and hasattr(pool, "putconn")):
                raise ConfigError(f"pool must be a psycopg2 pool (getconn/putconn), not {pool!r}")
            self._pool: Any = pool
            self._owns_pool = False
            self._label = f"pool={type(pool).__name__}"
        else:
            if not isinstance(dsn, str) or not dsn:
                raise ConfigError(f"PostgreSQL DSN must be a non-empty string, not {dsn!r}")
            self._pool = Pool(self._psycopg2, with_defaults(dsn), max_connections, self._timeout_s)
            self._owns_pool = True
            self._label = masked_url(dsn)
        self._schema = PgSchema(self._q, self.schema, self.table)
        #: The connections whose session holds the prepared claim (``claim_prepare``).
        self._prepared: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._prepare_and_claim = f"{self._q['claim_prepare']}; {self._q['claim_execute']}"

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> "PostgresStore":
        """Open ``postgresql://[user[:password]@]host[:port]/database``.

        Query options: ``schema``, ``table``, ``max_connections``, ``timeout``; every other
        option is passed to libpq (for example ``sslmode`` or
        ``connect_timeout``). ``create``: as the constructor's.
        """
        parts = urlsplit(url)
        options: Dict[str, Any] = {"create": create}
        libpq: List[Tuple[str, str]] = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in ("schema", "table"):
                options[key] = value
            elif key == "max_connections":
                try:
                    options[key] = int(value)
                except ValueError:
                    raise ConfigError(f"max_connections in {masked_url(url)!r} must be an integer") from None
            elif key == "timeout":
                try:
                    options[key] = float(value)
                except ValueError:
                    raise ConfigError(f"timeout in {masked_url(url)!r} must be a number of seconds") from None
            else:
                libpq.append((key, value))
        dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(libpq, quote_via=quote), ""))
        store = cls(dsn, **options)
        store._label = masked_url(url)
        return store

    # -- connections ----------------------------------------------------------------

    @contextmanager
    def _cursor(self, doing: str) -> Iterator[Cursor]:
        """A cursor on a pooled autocommit connection, the schema created or found first."""
        with pooled_cursor(self._psycopg2, self._pool, self._timeout_s, doing) as cur:
            if not self._schema.ready:
                self._schema.ensure(cur, self.create)
            yield cur

    def _one(self, name: str, doing: str, **params: Any) -> Tuple[Any, ...]:
        with self._cursor(doing) as cur:
            cur.execute(self._q[name], params)
            row: Tuple[Any, ...] = cur.fetchone()
            return row

    def _all(self, name: str, doing: str, **params: Any) -> List[Tuple[Any, ...]]:
        with self._cursor(doing) as cur:
            cur.execute(self._q[name], params)
            return list(cur.fetchall())

    def _rows_since(self, version: int, name: str, doing: str, **params: Any) -> Optional[List[Tuple[Any, ...]]]:
        """The rows of a read of what a schema holds from ``version`` on (pauses and requests, stored
        schedules); None from an older schema (a store opened with ``create=False`` reads it as it
        is, and it holds none)."""
        with self._cursor(doing) as cur:
            if self._schema.version < version:
                return None
            cur.execute(self._q[name], params)
            return list(cur.fetchall())

    # -- the contract (arguments checked by Store) -------------------------------------

    def now_ms(self) -> int:
        return int(self._one("now", "reading the server's clock")[0])

    def _claim(self, request: ClaimRequest) -> Claim:
        """One statement: the session's prepared claim (``claim_prepare`` in ``queries.sql``),
        prepared in the same round trip as the connection's first claim, and again if the
        session lost it (a pooler between the store and the server); a session that holds it
        already (another store on the same pool) is only marked."""
        params = (
            request.job, request.slot_ms, request.token or new_token(), request.runner, request.reason,
            request.lease_ms, request.max_attempts, request.max_late_ms, request.overlap, request.history_size,
            MAX_ATTEMPTS_KEPT, request.version,
        )  # fmt: skip
        with self._cursor(f"claim of {request.job!r}") as cur:
            conn = cur.connection
            if conn in self._prepared:
                try:
                    cur.execute(self._q["claim_execute"], params)
                except self._psycopg2.errors.InvalidSqlStatementName:
                    self._prepared.discard(conn)
            if conn not in self._prepared:
                try:
                    cur.execute(self._prepare_and_claim, params)
                except self._psycopg2.errors.DuplicatePreparedStatement:
                    cur.execute(self._q["claim_execute"], params)
                self._prepared.add(conn)
            row = cur.fetchone()
        return claim_of(request, row)

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """One statement per :data:`BATCH_MAX` claims (see ``claim_many`` in ``queries.sql``)."""
        if len(requests) == 1:
            return [self._claim(requests[0])]
        answers: List[Claim] = []
        for start in range(0, len(requests), BATCH_MAX):
            chunk = requests[start : start + BATCH_MAX]
            params = {
                "jobs": [r.job for r in chunk], "slots": [r.slot_ms for r in chunk],
                "tokens": [r.token or new_token() for r in chunk], "runners": [r.runner for r in chunk],
                "reasons": [r.reason for r in chunk], "leases": [r.lease_ms for r in chunk],
                "max_attempts": [r.max_attempts for r in chunk], "max_lates": [r.max_late_ms for r in chunk],
                "overlaps": [r.overlap for r in chunk], "histories": [r.history_size for r in chunk],
                "versions": [r.version for r in chunk], "keep_attempts": MAX_ATTEMPTS_KEPT,
            }  # fmt: skip
            rows = sorted(self._all("claim_many", f"claims of {len(chunk)} jobs", **params), key=lambda row: row[0])
            answers += [batch_claim_of(request, row) for request, row in zip(chunk, rows)]
        return answers

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        params = {"job": job, "slot_ms": slot_ms, "token": token, "lease_ms": lease_ms}
        return bool(self._one("heartbeat", f"heartbeat of {job!r}", **params)[0])

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        params = {"job": job, "slot_ms": slot_ms, "token": token, "status": status}
        params["error"] = None if error is None else no_nul(error)
        return bool(self._one("finish", f"finish of {job!r}", **params)[0])

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        """One statement per :data:`BATCH_MAX` finishes (``finish_many`` in ``queries.sql``; rule 25)."""
        answers: List[bool] = []
        for start in range(0, len(finishes), BATCH_MAX):
            chunk = finishes[start : start + BATCH_MAX]
            params = {
                "jobs": [f.job for f in chunk], "slots": [f.slot_ms for f in chunk], "tokens": [f.token for f in chunk],
                "statuses": [f.status for f in chunk],
                "errors": [None if f.error is None else no_nul(f.error) for f in chunk],
            }  # fmt: skip
            rows = sorted(self._all("finish_many", f"finishes of {len(chunk)} runs", **params))
            answers += [bool(row[1]) for row in rows]
        return answers

    def _record_return(
        self, job: str, slot_ms: int, attempt: int, runner: str, returned_ms: int, status: str, error: Optional[str]
    ) -> bool:
        error = None if error is None else no_nul(error)
        params = {"job": job, "slot_ms": slot_ms, "attempt": attempt, "runner": runner, "status": status}
        return bool(self._one("record_return", f"return of {job!r}", returned_ms=returned_ms, error=error, **params)[0])

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        params = {"job": job, "slot_ms": slot_ms, "token": token}
        return bool(self._one("release", f"release of {job!r}", **params)[0])

    def _pause(self, job: str, by: str, note: Optional[str]) -> JobState:
        return job_state_of(job, self._one("pause", f"pause of {job!r}", job=job, by=by, note=note))

    def _resume(self, job: str, by: str) -> JobState:
        return job_state_of(job, self._one("resume", f"resume of {job!r}", job=job))

    def _job_state(self, job: str) -> JobState:
        rows = self._rows_since(_CONTROLS_VERSION, "job_state", f"reading the state of {job!r}", job=job)
        return job_state_of(job, rows[0]) if rows else JobState(job)

    def _job_states(self) -> List[JobState]:
        rows = self._rows_since(_CONTROLS_VERSION, "job_states", "reading the states of the jobs") or []
        return [job_state_of(row[0], row[1:]) for row in rows]

    def _request_run(self, job: str, by: str, max_late_ms: int) -> ManualRequest:
        params = {"job": job, "by": by, "max_late_ms": max_late_ms, "keep": REQUESTS_KEPT}
        slot_ms, expires_ms = self._one("request_run", f"request of a run of {job!r}", **params)
        return ManualRequest(job, slot_ms, by, expires_ms, RequestState.PENDING)

    def _set_schedule(
        self,
        job: str,
        by: str,
        source: str,
        schedule: Optional[str],
        tz: Optional[str],
        task: Optional[str],
        kwargs: Dict[str, Any],
        options: Dict[str, Any],
    ) -> StoredSchedule:
        """One statement (``set_schedule`` in ``queries.sql``): kwargs and options go as their JSON text."""
        params = {"job": job, "by": by, "source": source, "schedule": schedule, "tz": tz, "task": task}
        params.update(kwargs=json.dumps(kwargs, allow_nan=False), options=json.dumps(options, allow_nan=False))
        version, updated_ms = self._one("set_schedule", f"setting the schedule of {job!r}", **params)
        return StoredSchedule(job, version, source, schedule, tz, task, kwargs, options, by, updated_ms)

    def _stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        """One statement; None from a schema older than version 4 (create=False reads it as it is)."""
        rows = self._rows_since(_SCHEDULES_VERSION, "stored_schedule", f"reading the schedule of {job!r}", job=job)
        return schedule_of(rows[0][0]) if rows else None

    def _schedule_changes(self, since: int) -> ScheduleChanges:
        """One statement, a range of the cursor's index; nothing from a schema older than version 4."""
        rows = self._rows_since(_SCHEDULES_VERSION, "schedule_changes", "reading the schedule changes", since=since)
        return changes_of(*rows[0]) if rows else ScheduleChanges(since)

    def _poll(self, since: int) -> Poll:
        """One statement (``poll`` in ``queries.sql``): the requests and the changes in one snapshot."""
        rows = self._rows_since(_SCHEDULES_VERSION, "poll", "polling for requests and schedule changes", since=since)
        if not rows:  # an older schema, read as it is: no stored schedule
            return Poll(self._pending_requests(), ScheduleChanges(since))
        return pg_rows.poll_of(rows[0])

    def _poll_announcing(self, since: int, announce: Announcement) -> Poll:
        """One statement (``poll_announcing``): the announcement kept, then what :meth:`_poll` reads."""
        if self._schema.version < _INSTANCES_VERSION:  # an older schema, used as it is: no announcements
            return self._poll(since)
        params = self._announce_params(announce)
        doing = "polling for requests and schedule changes"
        return pg_rows.poll_of(self._one("poll_announcing", doing, since=since, **params))

    def _announce_params(self, announcement: Announcement) -> Dict[str, Any]:
        return {"runner": announcement.runner, "body": announcement.to_json(), "ttl": self.instance_ttl_ms}

    def _announce(self, announcement: Announcement) -> None:
        doing = f"announcing instance {announcement.runner!r}"
        self._rows_since(_INSTANCES_VERSION, "announce", doing, **self._announce_params(announcement))

    def _withdraw(self, runner: str) -> None:
        with self._cursor(f"withdrawing instance {runner!r}") as cur:
            if self._schema.version >= _INSTANCES_VERSION:
                cur.execute(self._q["withdraw"], {"runner": runner})

    def _instances(self) -> List[LiveInstance]:
        rows = self._rows_since(_INSTANCES_VERSION, "instances", "reading the instances", ttl=self.instance_ttl_ms)
        return [read_announcement(*row) for row in rows or ()]

    def _pending_requests(self) -> List[ManualRequest]:
        rows = self._rows_since(_CONTROLS_VERSION, "pending_requests", "reading the pending requests") or []
        return [request_of(job, (slot, by, expires, state)) for job, slot, by, expires, state in rows]

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        rows = self._all("get", f"reading {job!r}", job=job, slot_ms=slot_ms)
        return run_of(rows[0]) if rows else None

    def _unfinished(self, job: str) -> List[Run]:
        return [run_of(row) for row in self._all("unfinished", f"reading {job!r}", job=job)]

    def _runs(self, job: str, limit: int) -> List[Run]:
        return [run_of(row) for row in self._all("runs", f"reading {job!r}", job=job, limit=limit)]

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        """One statement (``recent_runs`` in ``queries.sql``)."""
        found: Dict[str, List[Run]] = {job: [] for job in jobs}
        for row in self._all("recent_runs", f"reading the runs of {len(jobs)} jobs", jobs=jobs, limit=limit):
            run = run_of(row)
            found[run.job].append(run)
        return found

    def _overview(self, jobs: List[str]) -> Overview:
        """One statement (``overview``), one snapshot; from a schema older than 4 the reads one by one."""
        rows = self._rows_since(_SCHEDULES_VERSION, "overview", f"reading the overview of {len(jobs)} jobs", jobs=jobs)
        return pg_rows.overview_of(jobs, rows[0]) if rows else super()._overview(jobs)

    def _jobs(self) -> List[str]:
        return [row[0] for row in self._all("jobs", "listing jobs")]

    def server_version(self) -> str:
        """``PostgreSQL <version>`` of the server."""
        with self._cursor("reading the server version") as cur:
            cur.execute("SHOW server_version")
            return f"PostgreSQL {cur.fetchone()[0]}"

    def durability_warnings(self) -> List[str]:
        """Warn when a commit can be acknowledged before it is safely on disk, or before the
        standby a failover would promote has it (:mod:`leasecron.stores.pg_replication`)."""
        with self._cursor("reading the server's settings") as cur:
            cur.execute(self._q["durability"])
            settings = dict(cur.fetchall())
        warnings = []
        if settings.get("fsync") == "off":
            warnings.append("fsync is off: a crash of the server's host can lose or corrupt leases")
        if settings.get("synchronous_commit") == "off":
            warnings.append("synchronous_commit is off: a crash of the server can lose the last claims and"
                            " heartbeats it acknowledged")  # fmt: skip
        return warnings + self._replication().warnings()

    def replication(self) -> List[str]:
        """The server the store reached (of a multi-host DSN's, the primary), ``synchronous_standby_names``,
        ``synchronous_commit``, and each standby of ``pg_stat_replication`` with its sync state and
        replay lag."""
        return self._replication().lines()

    def _replication(self) -> Replication:
        return Replication.from_row(self._one("replication", "reading the server's replication"))

    def close(self) -> None:
        """Close the store's own pool; a pool passed in stays the caller's."""
        if self._owns_pool:
            self._pool.closeall()

    def __repr__(self) -> str:
        return f"PostgresStore({self._label!r}, schema={self.schema!r}, table={self.table!r})"
