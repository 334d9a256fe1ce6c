"""PostgreSQL through a failover, on a real primary and a standby the tests start (tests/pg_replicas.py).

What the contract promises (docs/replication.rst, "PostgreSQL standbys"): a multi-host URL with
``target_session_attrs=read-write`` follows the promotion of the standby; a call meanwhile fails
with StoreUnavailable (the engine retries it); a claim re-sent with its token wins the same
attempt on the promoted synchronous standby (protocol rule 2); a connection broken by the
failover, or on a server that refuses writes, is never handed out again; ``leasecron check``
shows the replication settings and the standbys, and warns when a failover could lose
acknowledged claims.

One pair per module (it starts in about a second). A test that fails over leaves the old
primary dead; the ``pair`` fixture brings it back as the new standby (a fresh base backup) for
the next test. The takeover times are printed: ``pytest -s`` shows them.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from typing import Any, Callable, Iterator, List, Tuple

import pytest

import leasecron
from leasecron import LeaseCron, StoreUnavailable
from leasecron.cli.commands import check_output
from leasecron.stores.pg_replication import required_standbys
from leasecron.stores.postgres import PostgresStore
from tests import pg_replicas
from tests.conftest import unavailable
from tests.engine.support import FAST, Seen
from tests.helpers import wait_for
from tests.servers import HOST, free_port
from tests.cli_support import run

#: The store's timeout (s) in these tests: a call after the promotion must be answered within it.
TIMEOUT = 5.0


@pytest.fixture(scope="module")
def started() -> Iterator[pg_replicas.PgPair]:
    """The module's primary and synchronous standby."""
    if not pg_replicas.available():
        unavailable("no PostgreSQL binaries (initdb, postgres, pg_basebackup) to start a primary and a standby")
    pair = pg_replicas.PgPair(synchronous=True)
    try:
        yield pair.start()
    finally:
        pair.stop()


@pytest.fixture
def pair(started: pg_replicas.PgPair) -> pg_replicas.PgPair:
    """The module's pair with a synchronous standby streaming (the old primary rejoined after a failover)."""
    if started.standby is None:
        started.rejoin()
    elif not started.synchronous:
        started.make_synchronous(True)
    return started


@pytest.fixture
def opened(pair: pg_replicas.PgPair) -> Iterator[Callable[..., PostgresStore]]:
    """``opened(query="", primary_first=False)``: a store on the pair's multi-host URL, in a schema of
    the test's own, with ``query`` appended to the URL; closed at the end of the test."""
    stores: List[PostgresStore] = []
    schema = f"fo_{uuid.uuid4().hex[:8]}"

    def open_one(query: str = "", primary_first: bool = False) -> PostgresStore:
        url = f"{pair.url(primary_first=primary_first)}&schema={schema}&timeout={TIMEOUT:g}{query}"
        store = leasecron.open_store(url)
        assert isinstance(store, PostgresStore)
        stores.append(store)
        return store

    yield open_one
    for store in stores:
        store.close()


def _backends(server: Any, application_name: str) -> int:
    rows = pg_replicas.PgPair.execute(
        server, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", application_name
    )
    return int(rows[0][0])


def _answered(call: Callable[[], Any], timeout: float = TIMEOUT) -> Tuple[Any, int]:
    """``call()`` retried while it raises StoreUnavailable, as the engine retries a claim: its answer
    and the number of tries that failed."""
    deadline = time.monotonic() + timeout
    failed = 0
    while True:
        try:
            return call(), failed
        except StoreUnavailable:
            failed += 1
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def test_required_standbys_reads_every_form_of_synchronous_standby_names() -> None:
    """synchronous_standby_names: empty waits for none, a list for the first, FIRST n / ANY n / n (...) for n."""
    assert required_standbys("") == ("FIRST", 0)
    assert required_standbys("s1, s2") == ("FIRST", 1)
    assert required_standbys('"s1"') == ("FIRST", 1)
    assert required_standbys("*") == ("FIRST", 1)
    assert required_standbys("2 (s1, s2, s3)") == ("FIRST", 2)
    assert required_standbys('first 1 ("s1", s2)') == ("FIRST", 1)
    assert required_standbys("ANY 2 (*)") == ("ANY", 2)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u:s3cret@{a},{b}/db?target_session_attrs=read-write&connect_timeout=1",
        "postgresql://{a},{b}/db?password=s3cret&target_session_attrs=read-write&connect_timeout=1",
        "host={h},{h} port={pa},{pb} password=s3cret dbname=db target_session_attrs=read-write connect_timeout=1",
    ],
    ids=["userinfo", "query", "key-value"],
)
def test_a_multi_host_dsn_opens_a_store_and_its_password_never_shows(dsn: str) -> None:
    """A DSN of several hosts opens a PostgresStore; its repr and the error when no host answers mask the password."""
    pa, pb = free_port(), free_port()
    dsn = dsn.format(a=f"{HOST}:{pa}", b=f"{HOST}:{pb}", h=HOST, pa=pa, pb=pb)
    store = leasecron.open_store(dsn) if "://" in dsn else PostgresStore(dsn)
    try:
        assert isinstance(store, PostgresStore) and "s3cret" not in repr(store) and "***" in repr(store)
        with pytest.raises(StoreUnavailable) as refused:
            store.now_ms()
        assert "s3cret" not in str(refused.value) and str(pb) in str(refused.value)
    finally:
        store.close()


def test_check_shows_the_synchronous_standby_and_no_failover_warning(pair: pg_replicas.PgPair) -> None:
    """check on the multi-host URL names the primary, both settings and the sync standby; no failover warning."""
    assert pair.standby is not None
    url = f"{pair.url()}&schema=fo_check"
    result = run(["-m", "leasecron", "check", url])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(rf"^store\s+postgresql\s+PostgresStore\('{re.escape(url)}'", out, re.M), out
    assert f"replication   primary {HOST}:{pair.primary.port} " in out
    assert f"replication   synchronous_standby_names 'FIRST 1 (\"{pair.standby.name}\")'" in out
    assert "replication   synchronous_commit on\n" in out
    assert f"replication   standby '{pair.standby.name}' at {HOST}: streaming, sync_state sync, replay lag " in out
    warnings = re.findall(r"^WARNING\s+(.*)$", out, re.M)
    assert [w for w in warnings if not w.startswith("fsync is off")] == [], out  # the test servers run without fsync


def test_check_warns_when_a_failover_could_lose_acknowledged_claims(
    pair: pg_replicas.PgPair, opened: Callable[..., PostgresStore]
) -> None:
    """check warns of an async standby, of synchronous_commit local or remote_write, of fewer sync standbys than set."""
    store = opened()
    store.get_run("job", 0)  # the schema, created while commits can still be replicated
    pair.make_synchronous(False)
    lines = check_output(store)
    async_line = r"replication +standby '[^']*' at [^:]*: streaming, sync_state async \(commits do not wait for it\)"
    assert any(re.match(async_line, line) for line in lines), lines
    assert any(re.match(r"WARNING +no synchronous standby \(synchronous_standby_names is empty\)", li) for li in lines)
    pair.make_synchronous(True)
    for setting in ("local", "remote_write"):
        weak = opened(f"&options=-c%20synchronous_commit%3D{setting}")
        [warning] = [w for w in weak.durability_warnings() if "failover" in w]
        assert re.fullmatch(rf"synchronous_commit is {setting}: a commit is acknowledged .*; a failover can lose the"
                            r" last claims and renewals this server acknowledged \(set it to on or remote_apply\)",
                            warning), warning  # fmt: skip
    assert pair.standby is not None
    pg_replicas.PgPair.execute(
        pair.primary, f"ALTER SYSTEM SET synchronous_standby_names = 'FIRST 2 ({pair.standby.name}, absent)'"
    )
    pg_replicas.PgPair.execute(pair.primary, "SELECT pg_reload_conf()")
    try:
        wait_for(lambda: any("asks for 2 synchronous standby(s) (FIRST) and 1 stream(s)" in w
                             for w in store.durability_warnings()), 5)  # fmt: skip
    finally:
        pair.make_synchronous(True)
    assert [w for w in store.durability_warnings() if not w.startswith("fsync")] == []


def test_a_standby_refusing_the_write_gives_store_unavailable_and_its_connection_is_dropped(
    pair: pg_replicas.PgPair, opened: Callable[..., PostgresStore]
) -> None:
    """A claim on a hot standby ("... in a read-only transaction") raises StoreUnavailable and closes its connection."""
    primary = opened()
    run = primary.claim("job", primary.now_ms() - 1000, runner="r1", lease_ms=60_000).run
    assert pair.standby is not None and run is not None
    name = f"lc_{uuid.uuid4().hex[:8]}"
    on_standby = PostgresStore(
        f"postgresql://{pair.standby.user}@{HOST}:{pair.standby.port}/postgres?application_name={name}",
        schema=primary.schema, create=False, timeout=TIMEOUT,
    )  # fmt: skip
    try:
        # reads work on the standby, once it replayed the claim (a synchronous commit waits for the
        # standby's flush, not its replay)
        wait_for(lambda: _raised(lambda: on_standby.get_run("job", run.slot_ms)) == run, 5)
        assert _backends(pair.standby, name) == 1
        with pytest.raises(StoreUnavailable, match="read-only transaction"):
            on_standby.claim("job", run.slot_ms, runner="r1", token=run.token, lease_ms=60_000)
        assert _backends(pair.standby, name) == 0
    finally:
        on_standby.close()


def test_after_a_failover_the_next_call_reaches_the_new_primary_on_a_new_connection(
    pair: pg_replicas.PgPair, opened: Callable[..., PostgresStore]
) -> None:
    """After kill -9 and promotion the next call is answered by the new primary at once: no dead connection reused."""
    name = f"lc_{uuid.uuid4().hex[:8]}"
    store = opened(f"&application_name={name}&max_connections=4")
    store.get_run("job", 0)  # the schema
    old = pair.primary
    lock = old.connect()
    lock.autocommit = False
    with lock.cursor() as cur:  # three reads wait on it at once, each on a connection of its own
        cur.execute(f"LOCK TABLE {store.schema}.{store.table} IN ACCESS EXCLUSIVE MODE")
    threads = [threading.Thread(target=store.get_run, args=("job", 0)) for _ in range(3)]
    for thread in threads:
        thread.start()
    wait_for(lambda: _backends(old, name) == 3, 5)
    lock.rollback()
    lock.close()
    for thread in threads:
        thread.join()
    assert _backends(old, name) == 3  # idle in the pool
    pair.kill_primary()
    pair.promote()
    assert store.replication()[0] == f"primary {HOST}:{pair.primary.port} (the server this session reached)"
    assert pair.primary is not old and _backends(pair.primary, name) == 1


@pytest.mark.parametrize("primary_first", [False, True], ids=["standby-first", "primary-first"])
def test_a_claim_re_sent_with_its_token_after_the_failover_wins_the_same_attempt(
    pair: pg_replicas.PgPair, opened: Callable[..., PostgresStore], primary_first: bool
) -> None:
    """Claim on the primary, kill -9, promote the sync standby: the claim re-sent with its token wins attempt 1."""
    store = opened(primary_first=primary_first)
    slot = store.now_ms() - 1000
    token = uuid.uuid4().hex
    won = store.claim("job", slot, runner="r1", token=token, lease_ms=60_000)
    assert won.outcome == "won" and won.run is not None
    killed = time.monotonic()
    pair.kill_primary()
    with pytest.raises(StoreUnavailable):  # no primary until the promotion
        store.claim("job", slot, runner="r1", token=token, lease_ms=60_000)
    pair.promote()
    promoted = time.monotonic()
    again, failed = _answered(lambda: store.claim("job", slot, runner="r1", token=token, lease_ms=60_000))
    answered = time.monotonic()
    assert (again.outcome, again.run.attempt, again.run.token, again.run.runner) == ("won", 1, token, "r1")
    assert again.run.lease_end_ms > won.run.lease_end_ms
    other = store.claim("job", slot, runner="r2", lease_ms=60_000)  # the run is held: it survived
    assert (other.outcome, other.run.token) == ("running", token)
    assert answered - promoted < TIMEOUT and failed == 0
    print(f"\nkill -9 -> claim answered by the promoted standby: {(answered - killed) * 1000:.0f} ms"
          f" (promotion {(promoted - killed) * 1000:.0f} ms of it)")  # fmt: skip


def test_a_commit_whose_wait_for_the_standby_was_cancelled_is_not_acted_on(
    pair: pg_replicas.PgPair, opened: Callable[..., PostgresStore]
) -> None:
    """A frozen synchronous standby; an operator cancels the backends waiting for it
    (``pg_cancel_backend``): the server answers the claim with success and a warning (the commit is
    local only); the store raises StoreUnavailable instead (rule 22). Once the standby is back the
    claim re-sent with its token wins the same attempt, and the next write is confirmed as usual."""
    store = opened()
    slot = store.now_ms() - 1000
    token = uuid.uuid4().hex
    answer: List[Any] = []
    claiming = threading.Thread(target=lambda: answer.append(_raised(
        lambda: store.claim("job", slot, runner="r1", token=token, lease_ms=60_000))))  # fmt: skip
    assert pair.standby is not None
    pair.standby.freeze()
    try:
        claiming.start()
        waiting = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        pids = wait_for(lambda: pair.execute(pair.primary, waiting), timeout=TIMEOUT / 2, message="the claim's wait")
        pair.execute(pair.primary, "SELECT pg_cancel_backend(%s)", pids[0][0])
        claiming.join(TIMEOUT)
    finally:
        pair.standby.thaw()
    assert isinstance(answer[0], StoreUnavailable), answer
    assert "not confirmed by the synchronous standbys" in str(answer[0])
    again, _ = _answered(lambda: store.claim("job", slot, runner="r1", token=token, lease_ms=60_000))
    assert (again.outcome, again.run.attempt, again.run.token) == ("won", 1, token)
    assert store.finish("job", slot, token, "success")


def _raised(call: Callable[[], Any]) -> Any:
    """``call()``'s answer, or the exception it raised."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the test asserts which
        return exc


def test_an_instance_starts_its_slots_on_the_new_primary_after_a_failover(
    pair: pg_replicas.PgPair, opened: Callable[..., PostgresStore]
) -> None:
    """A LeaseCron with a job every second goes on starting its slots, each once, after kill -9 and promotion."""
    cron = LeaseCron(opened(), runner="a", **FAST)
    seen = Seen(cron)
    cron.add_job(lambda: None, 1, name="tick")
    cron.start()
    try:
        seen.wait("success", 5)
        time.sleep(1.99 - time.time() % 1)  # a slot falls due 10 ms after the kill, before the promotion
        killed, killed_at = time.monotonic(), time.time()  # the store's clock is this host's
        pair.kill_primary()
        pair.promote()
        promoted = time.monotonic()
        next_start, event = wait_for(lambda: next(
            ((at, e) for at, e in list(seen.events) if e.type == "start" and at > promoted), None), 10)  # fmt: skip
        seen.wait("success", 5, slot_ms=event.slot_ms)
    finally:
        cron.stop(timeout=2)
    starts = [e.slot_ms for e in seen.of("start")]
    assert len(starts) == len(set(starts)) and not seen.of("lost"), seen.of()
    print(f"\nkill -9 -> next slot started on the promoted standby: {(next_start - killed) * 1000:.0f} ms"
          f" (promotion {(promoted - killed) * 1000:.0f} ms of it; the slot fell due at"
          f" {event.slot_ms - killed_at * 1000:+.0f} ms)")  # fmt: skip
