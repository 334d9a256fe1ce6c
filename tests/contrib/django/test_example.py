"""The example project (``examples/django``) under real gunicorn process trees.

The project is copied unchanged into the test's directory, its database migrated with ``manage.py
migrate``, and two gunicorn masters started there with the example's ``gunicorn.conf.py``
(``hooks("leasecron.contrib.django:cron")``), 3 sync workers each, on one leasecron store (SQLite,
then Redis). The job ``ticks.tick`` runs every second and records each attempt in the model
``Tick`` (one row: slot, attempt, reason, runner, outcome). What is checked comes from the store's
runs and from the model's rows:

* every worker's cron starts with the project's job (Django is set up in ``post_fork``);
* every slot of the window ran exactly once: one successful run in the store, one ``done`` row;
* SIGTERM to a master while its worker runs a slot: the worker hands the run over (its row
  ``aborted``), and a worker of the other master runs it (attempt 2, reason ``takeover``, the run
  ``handed_over``), within two heartbeats of the release;
* ``--preload`` (Django set up in the master, the cron built there and never run there) and a HUP
  that replaces the workers: no slot lost, none run twice.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import leasecron
from tests.conftest import Backend
from tests.cli_support import environment
from tests.contrib.gunicorn_support import Gunicorn, now_ms
from tests.contrib.test_gunicorn import next_slot, runner_of, stop
from tests.helpers import wait_for

pytestmark = pytest.mark.processes

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "django"
JOB = "ticks.tick"
#: The job's heartbeat in examples/django/ticks/cron.py (checked below).
HEARTBEAT_MS = 100
#: Room for process scheduling on a busy host, on top of the promised bound.
MARGIN_MS = 300
WORKERS = 3
#: The slots watched while both masters run, before the TERM.
BOTH = 5


def test_example_sets_the_heartbeat_these_tests_assume() -> None:
    """The bound below is written for the example job's heartbeat."""
    assert f"heartbeat_ms={HEARTBEAT_MS}," in (EXAMPLE / "ticks" / "cron.py").read_text()


def project_copy(tmp_path: Path) -> Path:
    """The example project copied unchanged (no bytecode, no database) into ``tmp_path/site``."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3", "*.db"))
    return site


def migrate(site: Path, store_url: str) -> None:
    """``python manage.py migrate`` in the copy: creates the project's database (``db.sqlite3``)."""
    done = subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=site, env=environment(store_url),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def rows(site: Path) -> Dict[int, List[Dict[str, Any]]]:
    """The model's rows (one per attempt), by slot, in the order they were written."""
    with sqlite3.connect(site / "db.sqlite3", timeout=20) as conn:
        conn.row_factory = sqlite3.Row
        found = [dict(row) for row in conn.execute("SELECT * FROM ticks_tick ORDER BY id")]
    by_slot: Dict[int, List[Dict[str, Any]]] = {}
    for row in found:
        by_slot.setdefault(row["slot_ms"], []).append(row)
    return by_slot


def finished(store: leasecron.Store, slot_ms: int, timeout: float) -> leasecron.Run:
    """Wait until the run of ``slot_ms`` ended; the run."""
    run = wait_for(lambda: (lambda r: r if r is not None and r.finished else None)(store.get_run(JOB, slot_ms)),
                   timeout=timeout, interval=0.05, message=f"slot {slot_ms} did not end")  # fmt: skip
    assert run is not None
    return run


def start(request: pytest.FixtureRequest, name: str, site: Path, store_url: str, *extra: str) -> Gunicorn:
    """A gunicorn master with the example's conf, 3 sync workers and the ``extra`` options; killed
    (if anything of it is still alive) at the end of the test."""
    server = Gunicorn(name, site, store_url, workers=WORKERS, extra=extra, app="wsgi:application")
    request.addfinalizer(server.close)
    return server


def running(server: Gunicorn, pids: Optional[List[int]] = None) -> List[int]:
    """Wait until ``pids`` (default: the server's first workers) run their crons, each started with
    the project's job (the hooks' line says ``running, 1 job(s)``: Django was set up before); the pids."""
    pids = server.wait_running(pids)
    for pid in pids:
        runner = re.escape(repr(runner_of(pid)))
        server.wait_pattern(re.compile(rf"leasecron: worker {pid} runs <LeaseCron {runner} running, 1 job\(s\)"), 5)
    return pids


@pytest.mark.timeout(120)
def test_two_gunicorns_run_each_slot_once_and_a_term_hands_the_live_run_over(
    store_backend: Backend, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two masters with 3 workers each on one store: each slot runs once (store and model agree);
    kill -TERM of one master while its worker runs a slot: a worker of the other runs it, attempt 2."""
    url = store_backend.url()
    store = store_backend.open()
    site = project_copy(tmp_path)
    migrate(site, url)
    second, first = start(request, "B", site, url), start(request, "A0", site, url)
    backups, pids = running(second), running(first)
    first_slot = next_slot(now_ms())
    finished(store, first_slot + (BOTH - 1) * 1000, timeout=BOTH + 10)  # both masters on every slot
    stopped: List[int] = []
    for attempt in range(3):  # the TERM must reach the worker while the handler runs (0.8 s)
        if attempt:
            first = start(request, f"A{attempt}", site, url)
            pids = running(first)
        ready = now_ms()
        tick = first.wait_tick(
            lambda t, a=pids, after=ready: t.kind == "start" and t.pid in a and t.slot_ms > after and t.attempt == 1,
            timeout=30,  # the workers of A and B race for each slot
            what="a slot started by A",
        )
        stop(first)
        stopped += pids
        ended = [t for t in first.ticks() if t.slot_ms == tick.slot_ms and t.pid == tick.pid and t.kind != "start"]
        assert len(ended) == 1, (tick, ended, first.describe())
        if ended[0].kind == "aborted":
            break
        print(f"\nA{attempt}: the handler of {tick.slot_ms} ended before the TERM reached it")
    else:
        pytest.fail("three times the handler ended before SIGTERM reached its worker")
    handed = finished(store, tick.slot_ms, timeout=10)
    last_slot = next_slot(now_ms()) + 1000  # B alone runs a slot or two more
    finished(store, last_slot, timeout=10)
    second.wait_tick(lambda t: t.slot_ms == last_slot and t.kind == "done", 5, f"tick {last_slot} done")
    page = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{second.port()}/", timeout=10).read())
    stop(second)

    # the hand-over: released by A's worker, taken over by one of B's within 2 heartbeats
    outcome = (handed.status, handed.attempt, handed.handed_over, handed.reason)
    assert outcome == ("success", 2, True, "takeover"), handed
    released, taken = handed.attempts[-2:]
    assert (released.runner, released.outcome) == (runner_of(tick.pid), "handed_over"), handed.attempts
    assert taken.runner in {runner_of(pid) for pid in backups}, (taken, backups)
    assert released.ended_ms is not None
    delay = taken.started_ms - released.ended_ms
    bound = f"{2 * HEARTBEAT_MS} + {MARGIN_MS} ms"
    print(f"\n{store_backend.name}: takeover {delay} ms after the hand-over (bound {bound})")
    assert 0 <= delay <= 2 * HEARTBEAT_MS + MARGIN_MS, handed.attempts
    recorded = rows(site)
    assert [(r["attempt"], r["reason"], r["runner"], r["outcome"]) for r in recorded[tick.slot_ms]] == [
        (1, "schedule", runner_of(tick.pid), "aborted"),
        (2, "takeover", taken.runner, "done"),
    ], recorded[tick.slot_ms]

    # every other slot of the window: one run, attempt 1, one row "done" by the run's runner
    workers = {runner_of(pid) for pid in backups + stopped}
    slots = range(first_slot, last_slot + 1, 1000)
    runners = []
    for slot in slots:
        run = store.get_run(JOB, slot)
        assert run is not None and run.status == "success" and run.runner in workers, (slot, run)
        runners.append(run.runner)
        if slot == tick.slot_ms:
            continue
        assert (run.attempt, run.handed_over) == (1, False), run
        assert [(r["attempt"], r["runner"], r["outcome"]) for r in recorded.get(slot, [])] == [
            (1, run.runner, "done")
        ], (slot, recorded.get(slot))
    ran_by_a = sum(runner in {runner_of(pid) for pid in stopped} for runner in runners)
    print(f"{store_backend.name}: {len(slots)} slots, {ran_by_a} run by A, {len(slots) - ran_by_a} by B;"
          f" slot {tick.slot_ms} handed over")
    assert page["pid"] in backups and page["cron"].startswith(f"<LeaseCron {runner_of(page['pid'])!r} running"), page
    assert page["ticks"] and page["ticks"][0]["outcome"] in {"running", "done"}, page



@pytest.mark.timeout(90)
@pytest.mark.parametrize("store_backend", ["sqlite"], indirect=True)
def test_preload_sets_django_up_in_the_master_and_a_hup_replaces_the_workers(
    store_backend: Backend, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With --preload the master loads the project (its cron built there, never run there), each
    worker starts it with the job; kill -HUP as a handler starts: new workers start it, the old ones
    stop, and every slot of the window has one successful run and one row ``done`` (a slot started
    twice was handed over first)."""
    url = store_backend.url()
    store = store_backend.open()
    site = project_copy(tmp_path)
    migrate(site, url)
    server = start(request, "g", site, url, "--preload")
    old = running(server)
    assert server.master not in old
    first_slot = next_slot(now_ms())
    finished(store, first_slot, timeout=10)
    since = now_ms()
    server.wait_tick(lambda t: t.kind == "start" and t.slot_ms > since, 10, "a handler starting")
    server.send(signal.SIGHUP)
    new = wait_for(lambda: server.running()[WORKERS:] if len(server.running()) >= 2 * WORKERS else None,
                   timeout=30, interval=0.05, message="no new workers")  # fmt: skip
    running(server, new)  # the new workers started the cron with the job too
    wait_for(lambda: set(old) <= set(server.exited()), timeout=30, interval=0.05, message="old workers stay")
    last_slot = next_slot(now_ms()) + 1000
    finished(store, last_slot, timeout=10)
    server.wait_tick(lambda t: t.slot_ms == last_slot and t.kind == "done", 5, f"tick {last_slot} done")
    stop(server)
    recorded = rows(site)
    for slot in range(first_slot, last_slot + 1, 1000):
        run = store.get_run(JOB, slot)
        assert run is not None and run.status == "success", (slot, run)
        assert run.runner != runner_of(server.master) and run.runner in {runner_of(p) for p in old + new}, run
        outcomes = [(r["runner"], r["outcome"]) for r in recorded.get(slot, [])]
        assert outcomes[-1] == (run.runner, "done") and len(outcomes) == run.attempt, (slot, outcomes, run)
        assert all(outcome == "aborted" for _, outcome in outcomes[:-1]) and run.handed_over == (run.attempt > 1)
    assert not [t for t in server.ticks() if t.pid == server.master]
