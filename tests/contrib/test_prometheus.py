"""leasecron.contrib.prometheus (issue 7): runs by outcome, claims and their latency, lease losses,
takeover delay and live runs, read back with ``registry.get_sample_value`` after real runs of real
instances on real stores (memory and SQLite); the rules of ``instrument()``; the import error
without prometheus_client; and the example docs/operating.rst shows, run as it is.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import List, Optional

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from leasecron import ConfigError, Context, LeaseCron, MemoryStore, Store, StoreUnavailable, open_store
from leasecron.contrib.prometheus import Metrics, instrument
from leasecron.stored import Overview
from leasecron.stores import ClaimRequest, DelegatingStore
from tests import servers
from tests.docs.readme_examples import shown_examples
from tests.conftest import Backend
from tests.engine import conftest as engine_conftest
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import CATCH_UP_HOUR, FAST, HEARTBEAT, HOURLY, LEASE, MARGIN, Calls, Recorder, dead_claim
from tests.engine.support import fence, handler, latest_hourly_slot, stored, waiting_on_its_signal
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
MEMORY_AND_SQLITE = pytest.mark.parametrize("backend", ["memory", "sqlite"], indirect=True)

# the engine tests' fixtures, here too: instances stopped and gates opened at teardown
make_cron = engine_conftest.make_cron
gates = engine_conftest.gates


def value(registry: CollectorRegistry, name: str, **labels: str) -> Optional[float]:
    """A sample's value, or None when the series does not exist."""
    return registry.get_sample_value(name, labels)


@MEMORY_AND_SQLITE
def test_success_and_failure_count_runs_claims_latency_and_live_runs(make_cron: MakeCron, gates: Gates) -> None:
    """Two caught-up jobs, one succeeding and one raising: runs_total by outcome, claims_total and
    claim_seconds per claim sent, live_runs while the handler runs, and zeros for what did not happen."""
    registry = CollectorRegistry()
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    go = gates()
    calls = Calls()
    a.add_job(handler(a.store, calls, lambda ctx: go.wait(5)), HOURLY, name="ok")

    def bad() -> None:
        raise ValueError("boom")

    a.add_job(bad, HOURLY, name="bad")
    instrument(a, registry=registry)
    a.start()
    calls.wait(1, timeout=3)
    rec.wait("failed", job="bad")
    wait_for(lambda: value(registry, "leasecron_live_runs", job="bad") == 0, 2)
    assert value(registry, "leasecron_live_runs", job="ok") == 1
    go.set()
    rec.wait("success", job="ok")
    wait_for(lambda: value(registry, "leasecron_live_runs", job="ok") == 0, 2)

    for job, ended in (("ok", "success"), ("bad", "failed")):
        for outcome in ("success", "failed", "lost", "handover"):
            assert value(registry, "leasecron_runs_total", job=job, outcome=outcome) == int(outcome == ended), outcome
        assert value(registry, "leasecron_claims_total", job=job, reason="catch-up", outcome="won") == 1
        assert value(registry, "leasecron_claim_seconds_count", job=job) == 1
        took = value(registry, "leasecron_claim_seconds_sum", job=job)
        assert took is not None and 0 < took < 2
        for cause in ("fenced", "unrenewed"):
            assert value(registry, "leasecron_lease_lost_total", job=job, cause=cause) == 0
        assert value(registry, "leasecron_takeover_delay_seconds_count", job=job) == 0
    assert value(registry, "leasecron_claims_total", job="ok", reason="schedule", outcome="won") is None


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_retries_and_timeouts_are_counted(make_cron: MakeCron) -> None:
    """retries_total counts the failed tries another followed (retry events); timeouts_total the
    runs a timeout ended, which runs_total also counts as failed."""
    registry = CollectorRegistry()
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)

    def flaky(ctx: Context) -> None:
        if ctx.try_number < 3:
            raise ValueError(f"try {ctx.try_number}")

    a.add_job(flaky, HOURLY, name="flaky", retries=2, retry_delay_ms=10)
    a.add_job(lambda ctx: ctx.signal.wait(10), HOURLY, name="slow", timeout_ms=200)
    instrument(a, registry=registry)
    a.start()
    rec.wait("success", job="flaky")
    rec.wait("failed", job="slow")
    assert value(registry, "leasecron_retries_total", job="flaky") == 2
    assert value(registry, "leasecron_retries_total", job="slow") == 0
    assert value(registry, "leasecron_timeouts_total", job="slow") == 1
    assert value(registry, "leasecron_timeouts_total", job="flaky") == 0
    assert value(registry, "leasecron_runs_total", job="slow", outcome="failed") == 1
    assert value(registry, "leasecron_runs_total", job="flaky", outcome="success") == 1


def test_each_claim_of_a_batch_is_counted_and_timed() -> None:
    """claim_many through the instrumented store: one claims_total and one claim_seconds sample
    per claim of the batch, with its own reason and outcome."""
    registry = CollectorRegistry()
    cron = LeaseCron(MemoryStore(), runner="a")
    instrument(cron, registry=registry)
    slot = cron.store.now_ms() - 1_000
    answers = cron.store.claim_many(
        [ClaimRequest("x", slot, "a"), ClaimRequest("x", slot, "b"), ClaimRequest("y", slot, "a", reason="takeover")]
    )
    assert [c.outcome for c in answers] == ["won", "running", "none"]
    assert value(registry, "leasecron_claims_total", job="x", reason="schedule", outcome="won") == 1
    assert value(registry, "leasecron_claims_total", job="x", reason="schedule", outcome="running") == 1
    assert value(registry, "leasecron_claims_total", job="y", reason="takeover", outcome="none") == 1
    assert value(registry, "leasecron_claim_seconds_count", job="x") == 2


@MEMORY_AND_SQLITE
def test_takeover_delay_is_the_new_start_minus_the_lease_end_last_seen(backend: Backend) -> None:
    """Measured through the instrumented store, by hand: a takeover after a seen lease ran out is
    observed as started_ms - that lease end, exactly; one of a released run, or of a run never
    seen, is not observed."""
    registry = CollectorRegistry()
    cron = LeaseCron(backend.open(), runner="b", **FAST)
    instrument(cron, registry=registry)
    store, other = cron.store, backend.open()
    slot = latest_hourly_slot(other)

    def count() -> Optional[float]:
        return value(registry, "leasecron_takeover_delay_seconds_count", job="job")

    # a dead runner; a backup's check sees its lease; the lease runs out; the next check wins
    dead = dead_claim(other, "job", slot, 300)
    seen = store.claim("job", slot, runner="b", reason="takeover", lease_ms=LEASE)
    assert seen.outcome == "running" and seen.run is not None and seen.run.lease_end_ms == dead.lease_end_ms
    wait_for(lambda: other.now_ms() > dead.lease_end_ms, 2)
    won = store.claim("job", slot, runner="b", reason="takeover", lease_ms=LEASE)
    assert won.outcome == "won" and won.run is not None and won.run.attempt == 2
    assert count() == 1
    delay = value(registry, "leasecron_takeover_delay_seconds_sum", job="job")
    assert delay == pytest.approx((won.run.started_ms - dead.lease_end_ms) / 1000, abs=1e-9)
    assert delay is not None and delay >= 0
    assert value(registry, "leasecron_claims_total", job="job", reason="takeover", outcome="running") == 1
    assert value(registry, "leasecron_claims_total", job="job", reason="takeover", outcome="won") == 1

    # a released (handed-over) run: seen alive, released, taken over: no takeover delay
    released_slot = slot - HOURLY * 1000
    leaving = dead_claim(other, "job2", released_slot, 30_000, runner="leaving")
    assert store.claim("job2", released_slot, runner="b", reason="takeover", lease_ms=LEASE).outcome == "running"
    assert other.release("job2", released_slot, leaving.token)
    assert store.claim("job2", released_slot, runner="b", reason="takeover", lease_ms=LEASE).outcome == "won"
    assert value(registry, "leasecron_takeover_delay_seconds_count", job="job2") == 0

    # a run this instance never looked at before its lease ran out: nothing to measure from
    unseen = dead_claim(other, "job3", slot, 1)
    wait_for(lambda: other.now_ms() > unseen.lease_end_ms, 2)
    assert store.claim("job3", slot, runner="b", reason="takeover", lease_ms=LEASE).outcome == "won"
    assert value(registry, "leasecron_takeover_delay_seconds_count", job="job3") == 0
    assert count() == 1


@MEMORY_AND_SQLITE
def test_backup_taking_over_an_abandoned_run_observes_the_delay(make_cron: MakeCron, gates: Gates) -> None:
    """An instance abandons its run (stop with timeout 0); the instrumented backup takes it over and
    observes a delay between the true one (from the final lease end) and that plus 2 heartbeats."""
    registry = CollectorRegistry()
    keep_running = gates()
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    b = make_cron("b", catch_up_ms=CATCH_UP_HOUR)
    rec_b = Recorder(b)
    calls = Calls()

    def body(ctx: Context) -> None:
        if ctx.attempt == 1:
            keep_running.wait(10)  # ignores its signal: abandoned on stop

    for cron in (a, b):
        cron.add_job(handler(cron.store, calls, body), HOURLY, name="job")
    metrics = instrument(a, registry=registry)
    assert instrument(b, registry=registry) is metrics  # one set of metrics per registry
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    b.start()
    # b checks the live run again and again while a renews it: the first lease ends it saw are long gone
    wait_for(lambda: (value(registry, "leasecron_claims_total", job="job", reason="takeover", outcome="running")
                      or 0) >= 5, 3)  # fmt: skip
    a.stop(timeout=0)
    threading.Event().wait(HEARTBEAT / 1000)  # a heartbeat in flight at the stop has landed
    lease_end = stored(b.store, "job", ctx.slot_ms).lease_end_ms
    start = rec_b.wait("start", timeout=3, reason="takeover")
    assert start.run is not None and start.attempt == 2
    true_delay = (start.run.started_ms - lease_end) / 1000
    assert value(registry, "leasecron_takeover_delay_seconds_count", job="job") == 1
    delay = value(registry, "leasecron_takeover_delay_seconds_sum", job="job")
    assert delay is not None and true_delay - 1e-9 <= delay <= true_delay + (2 * HEARTBEAT + MARGIN) / 1000
    rec_b.wait("success")
    assert value(registry, "leasecron_runs_total", job="job", outcome="success") == 1  # b's attempt 2
    assert value(registry, "leasecron_runs_total", job="job", outcome="lost") == 0  # abandoned is no end
    assert value(registry, "leasecron_claims_total", job="job", reason="catch-up", outcome="won") == 1  # a's


@MEMORY_AND_SQLITE
def test_a_fenced_lease_counts_as_lost(make_cron: MakeCron, backend: Backend) -> None:
    """A heartbeat refused after another attempt took the run: lease_lost_total{cause="fenced"} and
    runs_total{outcome="lost"} count it."""
    registry = CollectorRegistry()
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec, calls = waiting_on_its_signal(a)
    instrument(a, registry=registry)
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    fence(backend.open(), ctx)
    rec.wait("lost", timeout=2)
    assert value(registry, "leasecron_lease_lost_total", job="job", cause="fenced") == 1
    assert value(registry, "leasecron_lease_lost_total", job="job", cause="unrenewed") == 0
    assert value(registry, "leasecron_runs_total", job="job", outcome="lost") == 1
    assert value(registry, "leasecron_runs_total", job="job", outcome="success") == 0


def test_a_lease_not_renewable_for_lease_ms_counts_as_unrenewed(sqlite_backend: Backend) -> None:
    """A runner whose store stops taking writes loses its lease by its local deadline:
    lease_lost_total{cause="unrenewed"}."""
    registry = CollectorRegistry()
    blocker = sqlite_backend.write_blocker()
    store = open_store(sqlite_backend.url_giving_up_after(50))
    cron = LeaseCron(store, runner="a", lease_ms=600, heartbeat_ms=HEARTBEAT, jitter_ms=0, catch_up_ms=CATCH_UP_HOUR)
    rec, calls = waiting_on_its_signal(cron)
    instrument(cron, registry=registry)
    try:
        cron.start()
        calls.wait(1, timeout=3)
        blocker.take()
        lost = rec.wait("lost", timeout=2)
        assert "lease" in (lost.error or "")
        assert value(registry, "leasecron_lease_lost_total", job="job", cause="unrenewed") == 1
        assert value(registry, "leasecron_lease_lost_total", job="job", cause="fenced") == 0
        assert value(registry, "leasecron_runs_total", job="job", outcome="lost") == 1
    finally:
        blocker.close()
        cron.stop(timeout=1)
        store.close()


@MEMORY_AND_SQLITE
def test_job_paused_gauge_and_manual_runs_counter(make_cron: MakeCron) -> None:
    """job_paused follows pause and resume (read from the store at each scrape); manual_runs_total
    counts the manual runs this instance started; a manual claim is counted with reason manual."""
    registry = CollectorRegistry()
    a = make_cron("a", catch_up_ms=0, poll_ms=50)
    rec = Recorder(a)
    for name in ("job", "other"):
        a.add_job(lambda: None, HOURLY, name=name)
    instrument(a, registry=registry)
    a.start()
    for job in ("job", "other"):
        assert value(registry, "leasecron_job_paused", job=job) == 0
        assert value(registry, "leasecron_manual_runs_total", job=job) == 0
    a.pause("job", note="vendor API down")
    assert value(registry, "leasecron_job_paused", job="job") == 1
    assert value(registry, "leasecron_job_paused", job="other") == 0
    a.trigger("other")
    rec.wait("success", job="other")
    assert value(registry, "leasecron_manual_runs_total", job="other") == 1
    assert value(registry, "leasecron_manual_runs_total", job="job") == 0
    assert value(registry, "leasecron_claims_total", job="other", reason="manual", outcome="won") == 1
    a.resume("job")
    assert value(registry, "leasecron_job_paused", job="job") == 0


class CountingStates(DelegatingStore):
    """A store that counts the calls of ``overview()``, or fails them when ``failing``."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls = 0
        self.failing = False

    def _overview(self, jobs: List[str]) -> Overview:
        self.calls += 1
        if self.failing:
            raise StoreUnavailable("the store is down")
        return super()._overview(jobs)


def test_a_scrape_reads_the_paused_jobs_with_one_store_call(caplog: pytest.LogCaptureFixture) -> None:
    """Two instances on one store, with 30 jobs between them: one overview() call per scrape.
    A store that fails it leaves job_paused out of that scrape (logged); the rest is served."""
    registry = CollectorRegistry()
    store = CountingStates(MemoryStore())
    crons = [LeaseCron(store, runner=name, **FAST) for name in ("a", "b")]
    for n in range(30):
        crons[n % 2].add_job(lambda: None, HOURLY, name=f"job-{n}")
        if n % 3 == 0:
            crons[n % 2].pause(f"job-{n}")
    for cron in crons:
        instrument(cron, registry=registry)
    text = generate_latest(registry).decode()
    assert store.calls == 1
    assert _sample_lines(text, 'leasecron_job_paused{job="job-3"}') == ['leasecron_job_paused{job="job-3"} 1.0']
    assert _sample_lines(text, 'leasecron_job_paused{job="job-4"}') == ['leasecron_job_paused{job="job-4"} 0.0']
    assert len(_sample_lines(text, "leasecron_job_paused{")) == 30
    store.failing = True
    text = generate_latest(registry).decode()
    assert store.calls == 2
    assert _sample_lines(text, "leasecron_job_paused{") == []
    assert len(_sample_lines(text, "leasecron_live_runs{")) == 30
    line = r"leasecron: cannot read the jobs for the metrics, runner '[ab]': the store is down"
    assert len(re.findall(line, caplog.text)) == 1  # the instance whose wrapper was asked first


def test_instrument_refuses_a_running_instance_and_a_second_time(tmp_path: Path) -> None:
    """instrument() after start() raises ConfigError and leaves the store alone; so does instrumenting
    one instance twice into the same metrics."""
    registry = CollectorRegistry()
    cron = LeaseCron(f"sqlite:///{tmp_path / 'x.db'}", runner="a", **FAST)
    cron.start()
    try:
        store = cron.store
        with pytest.raises(ConfigError, match=r"before cron\.start\(\)"):
            instrument(cron, registry=registry)
        assert cron.store is store
    finally:
        cron.stop(timeout=1)
    instrument(cron, registry=registry)
    with pytest.raises(ConfigError, match="already instrumented"):
        instrument(cron, registry=registry)
    cron.store.close()


def test_namespace_and_a_metrics_object_of_ones_own(tmp_path: Path) -> None:
    """The namespace prefixes every metric; Metrics(registry) made first is the one instrument() reuses."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, namespace="myapp")
    crons = [LeaseCron(f"sqlite:///{tmp_path / 'x.db'}", runner=name, **FAST) for name in ("a", "b")]
    for cron in crons:
        cron.add_job(lambda: None, HOURLY, name="job")
        assert instrument(cron, registry=registry, namespace="myapp") is metrics
    assert value(registry, "myapp_runs_total", job="job", outcome="success") == 0
    assert value(registry, "myapp_live_runs", job="job") == 0
    assert value(registry, "leasecron_runs_total", job="job", outcome="success") is None
    for cron in crons:
        cron.store.close()


def test_import_without_prometheus_client_names_the_extra() -> None:
    """Importing the module where prometheus_client is missing fails with the pip command to run."""
    code = "import sys; sys.modules['prometheus_client'] = None; import leasecron.contrib.prometheus"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 1
    assert "ImportError" in result.stderr and "pip install 'leasecron[prometheus]'" in result.stderr, result.stderr


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return response.read().decode()


def _sample_lines(text: str, prefix: str) -> List[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.timeout(60)
def test_the_readme_example_serves_the_metrics(tmp_path: Path) -> None:
    """examples/prometheus/metrics.py, run as it is: its caught-up run shows in /metrics; SIGTERM ends it (exit 0)."""
    port = servers.free_port()
    env = {**os.environ, "LEASECRON_STORE": f"sqlite:///{tmp_path / 'example.db'}", "METRICS_PORT": str(port)}
    # the example's job runs every minute: start it well inside a minute, so that only the caught-up run
    # shows (started in a minute's last seconds, the next minute's run came too: success 2.0, seen in CI)
    wait_for(lambda: time.time() % 60 < 45, 20, interval=0.2)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "prometheus" / "metrics.py")],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:

        def succeeded() -> Optional[str]:
            if proc.poll() is not None:
                pytest.fail(f"the example exited with {proc.returncode}")
            try:
                text = _scrape(port)
            except OSError:
                return None
            done = 'leasecron_runs_total{job="report",outcome="success"} 1.0'
            return text if done in text else None

        text = wait_for(succeeded, 20, interval=0.1, message="the example's run never showed in /metrics")
        assert 'leasecron_claims_total{job="report",outcome="won",reason="catch-up"} 1.0' in text
        assert _sample_lines(text, 'leasecron_claim_seconds_count{job="report"}') == [
            'leasecron_claim_seconds_count{job="report"} 1.0'
        ]
        assert 'leasecron_live_runs{job="report"} 0.0' in text
        assert 'leasecron_lease_lost_total{cause="fenced",job="report"} 0.0' in text
        assert "# TYPE leasecron_takeover_delay_seconds histogram" in text
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=5)
    assert proc.returncode == 0, out
    assert "leasecron: won job 'report'" in out and "leasecron: succeeded job 'report'" in out, out
    assert "leasecron: stopped runner" in out, out
    with pytest.raises(OSError):  # the process is gone: nothing serves the port any more
        _scrape(port)


def test_the_docs_show_the_example_unchanged() -> None:
    """The README or the docs show examples/prometheus/metrics.py exactly as the test above runs it."""
    example = (ROOT / "examples" / "prometheus" / "metrics.py").read_text(encoding="utf-8")
    assert shown_examples()["examples/prometheus/metrics.py"] == example
