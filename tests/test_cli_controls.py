"""The operators' controls of the ``leasecron`` command, run as real processes on SQLite and Redis:
``pause``, ``resume``, ``trigger [--wait]``, ``show``, and what ``jobs`` and ``runs`` show of them
(paused jobs, pending manual runs, the chain of attempts)."""

from __future__ import annotations

import getpass
import json
import re
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

import leasecron
from leasecron import LeaseCron, MemoryStore, Store
from leasecron.cli import commands
from leasecron.cli.show import parse_slot
from leasecron.formatting import attempt_chain, utc_time
from leasecron.controls import JobState
from leasecron.runs import Attempt, Run
from leasecron.stores.delegating import DelegatingStore

from .cli_support import parse_table
from .conftest import BACKENDS, Backend
from .helpers import wait_for

pytestmark = pytest.mark.processes

#: A store every command is run on: the embedded one, and one server.
STORES = ["sqlite", "redis"]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``python -m leasecron ARGS`` and capture its output."""
    return subprocess.run([sys.executable, "-m", "leasecron", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(params=STORES)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """SQLite, then Redis, with a namespace of this test's own."""
    b = BACKENDS[request.param](tmp_path)
    yield b
    b.close()


def takeover_run(store: Store, job: str = "report") -> Run:
    """A run of ``job`` whose attempt 1 (web-1) expired and attempt 2 (web-2, a takeover) failed
    with a two-line error; returns it."""
    slot = (store.now_ms() // 1000 - 5) * 1000
    first = store.claim(job, slot, runner="web-1", lease_ms=20, max_late_ms=3_600_000).run
    assert first is not None
    wait_for(lambda: store.now_ms() > first.lease_end_ms, message="the lease of attempt 1 did not end")
    second = store.claim(job, slot, runner="web-2", reason="takeover", lease_ms=60_000, max_late_ms=3_600_000)
    assert second.won and second.run is not None and second.run.attempt == 2
    assert store.finish(job, slot, second.run.token, "failed", "RuntimeError: disk full\n  on /var/spool")
    run = store.get_run(job, slot)
    assert run is not None
    return run


def with_a_run(backend: Backend) -> Tuple[Store, str, int]:
    """A store of ``backend`` with a run of "report" (:func:`takeover_run`), its URL, and its clock after."""
    store = backend.open()
    takeover_run(store)
    return store, backend.url(), store.now_ms()


# -- pause and resume --------------------------------------------------------------------------


def test_pause_resume_and_jobs(backend: Backend) -> None:
    """`pause URL JOB --note --by` pauses the job in the store (who, when, why) and says so; `jobs`
    shows it paused with who/when/note; `resume` clears it and tells what it undid; a second
    `resume` says nothing changed. `--json` prints the job's state."""
    store, url, before = with_a_run(backend)
    paused = cli("pause", url, "report", "--note", "vendor API down", "--by", "alice@ops")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("Paused job 'report': by alice@ops, ") and "note: vendor API down" in paused.stdout
    assert paused.stderr == ""  # the job has runs: no warning
    state = store.job_state("report")
    assert (state.paused, state.paused_by, state.note) == (True, "alice@ops", "vendor API down")
    assert state.paused_ms is not None and before <= state.paused_ms <= store.now_ms()

    jobs = cli("jobs", url)
    assert jobs.returncode == 0, jobs.stderr
    [row] = parse_table(jobs.stdout)
    assert (row["job"], row["paused"], row["pending"]) == ("report", "yes", "0")
    assert re.search(
        rf"^Paused .*\n  report  by alice@ops, {re.escape(utc_time(state.paused_ms))} UTC \(.* ago\): vendor API down$",
        jobs.stdout, re.M,
    ), jobs.stdout  # fmt: skip
    [listed] = json.loads(cli("jobs", url, "--json").stdout)
    assert (listed["paused"], listed["paused_by"], listed["paused_ms"], listed["note"], listed["requests"]) == (
        True, "alice@ops", state.paused_ms, "vendor API down", [])  # fmt: skip

    resumed = cli("resume", url, "report", "--by", "bob@ops")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("Resumed job 'report' (it was paused by alice@ops, ")
    assert "not caught up" in resumed.stdout
    assert not store.job_state("report").paused
    again = cli("resume", url, "report", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"job": "report", "paused": False, "paused_by": None, "paused_ms": None,
                                        "note": None, "requests": []}  # fmt: skip
    assert cli("resume", url, "report").stdout.strip() == "Job 'report' was not paused: nothing changed."
    [row] = parse_table(cli("jobs", url).stdout)
    assert row["paused"] == "no" and "Paused" not in cli("jobs", url).stdout


def test_pause_json_default_by_and_a_job_without_runs(tmp_path: Path) -> None:
    """`pause --json` prints the job's state; `--by` defaults to user@host; a job without stored runs
    is paused all the same, with a warning on stderr that the name may be mistyped."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with leasecron.open_store(url) as store:
        assert store.jobs() == []  # creates the store
    result = cli("pause", url, "nightly", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"job", "paused", "paused_by", "paused_ms", "note", "requests"}
    assert (data["job"], data["paused"], data["note"]) == ("nightly", True, None)
    assert data["paused_by"] == f"{getpass.getuser()}@{socket.gethostname()}"
    [warning] = result.stderr.strip().splitlines()
    assert warning.startswith("leasecron pause: warning: job 'nightly' has no stored runs")
    [row] = parse_table(cli("jobs", url).stdout)
    assert (row["job"], row["paused"], row["runs"]) == ("nightly", "yes", "0")


def test_controls_never_create_a_store(tmp_path: Path) -> None:
    """`pause|resume|trigger` on a SQLite file that does not exist: exit 1, one line naming the file
    and saying the command creates no store; no file is left behind."""
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    for args in (["pause", url, "job"], ["resume", url, "job"], ["trigger", url, "job"], ["show", url, "job", "0"]):
        result = cli(*args)
        assert result.returncode == 1, (args, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(f"leasecron {args[0]}: error: ") and "typo.db' does not exist" in line, line
        if args[0] != "show":
            assert f"`leasecron {args[0]}` creates no store" in line and "leasecron check URL" in line, line
    assert list(tmp_path.iterdir()) == []


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    """A bad --by, a too long --note, --timeout without --wait, a negative --max-late-ms: exit 2, one line."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with leasecron.open_store(url) as store:
        assert store.jobs() == []  # creates the store
    cases = {
        ("pause", url, "job", "--by", ""): "by (who acts) must be a non-empty string",
        ("pause", url, "job", "--note", "x" * 1001): "note must be at most 1000 characters",
        ("trigger", url, "job", "--timeout", "5"): "--timeout is the longest wait of --wait",
        ("trigger", url, "job", "--wait", "--timeout", "0"): "--timeout must be a number of seconds above 0",
        ("trigger", url, "job", "--max-late-ms", "-1"): "max_late_ms must be an integer from 0",
    }
    for args, message in cases.items():
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(f"leasecron {args[0]}: error: ") and message in line, (args, line)
    with leasecron.open_store(url) as store:
        assert store.job_states() == []  # none of them wrote


# -- trigger -------------------------------------------------------------------------------------


def test_trigger_prints_the_slot_and_jobs_shows_it_pending(backend: Backend) -> None:
    """`trigger URL JOB` requests a manual run and prints its slot (epoch ms and UTC) and when it
    expires; no instance runs: `jobs` shows it pending; `--json` prints the request."""
    store, url, before = with_a_run(backend)
    result = cli("trigger", url, "report", "--by", "carol@ops", "--max-late-ms", "60000")
    assert result.returncode == 0, result.stderr
    match = re.match(r"Requested a manual run of 'report': slot (\d+) \((.*) UTC\), by carol@ops\.", result.stdout)
    assert match, result.stdout
    slot_ms = int(match.group(1))
    assert before <= slot_ms <= store.now_ms() and match.group(2) == utc_time(slot_ms, True)
    assert "the request expires at " in result.stdout and "(in 1m 10s)" in result.stdout
    [request] = store.job_state("report").requests
    assert (request.slot_ms, request.requested_by, request.state) == (slot_ms, "carol@ops", "pending")
    assert request.expires_ms == slot_ms + 70_000

    jobs = cli("jobs", url)
    [row] = parse_table(jobs.stdout)
    assert row["pending"] == "1"
    assert re.search(rf"^Pending manual runs .*\n  report  slot {re.escape(utc_time(slot_ms, True))} UTC \({slot_ms}\),"
                     r" by carol@ops, expires in \d", jobs.stdout, re.M), jobs.stdout  # fmt: skip

    second = cli("trigger", url, "report", "--json", "--by", "carol@ops")
    assert second.returncode == 0, second.stderr
    data = json.loads(second.stdout)
    assert list(data) == ["request"]
    assert set(data["request"]) == {"job", "slot_ms", "slot", "requested_by", "expires_ms", "state"}
    assert data["request"]["state"] == "pending" and data["request"]["slot_ms"] > slot_ms
    [listed] = json.loads(cli("jobs", url, "--json").stdout)
    assert [r["slot_ms"] for r in listed["requests"]] == [slot_ms, data["request"]["slot_ms"]]


def _bad() -> None:
    raise ValueError("bad input\nsecond line")


@pytest.fixture
def instance(backend: Backend) -> Iterator[LeaseCron]:
    """A started LeaseCron in this test's process with yearly jobs "ok" (succeeds) and "bad" (raises):
    only manual runs run."""
    cron = LeaseCron(backend.open(), runner="web-1", jitter_ms=0, catch_up_ms=0, poll_ms=100)
    cron.add_job(lambda: None, "0 0 1 1 *", name="ok")
    cron.add_job(_bad, "0 0 1 1 *", name="bad")
    cron.start()
    yield cron
    cron.stop(timeout=10)


def test_trigger_wait_success_and_failure(backend: Backend, instance: LeaseCron) -> None:
    """`trigger --wait` with an instance running the job: exit 0 when the run succeeded (printing the
    attempt that started and the chain), 1 when it failed (printing the error in full) or was
    skipped (another run of the job held its lease); `--json` prints the request (claimed), the
    result and the run with its attempts."""
    url = backend.url()
    ok = cli("trigger", url, "ok", "--wait", "--timeout", "30")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^attempt 1 started on web-1 \(manual\), \d+ ms after the request$", ok.stdout, re.M), ok.stdout
    assert re.search(r"^success: the manual run of 'ok' at slot \d+ ended .* after the request; attempts: 1 web-1"
                     r" success$", ok.stdout, re.M), ok.stdout  # fmt: skip

    bad = cli("trigger", url, "bad", "--wait", "--timeout", "30")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert re.search(r"^failed: the manual run of 'bad' .*; attempts: 1 web-1 failed$", bad.stdout, re.M), bad.stdout
    assert "error: ValueError: bad input\n       second line" in bad.stdout

    store = backend.open()
    held = store.claim("ok", store.now_ms() - 5_000, runner="elsewhere", lease_ms=60_000).run
    assert held is not None  # a live run of "ok": overlap="skip" skips the manual run
    skipped = cli("trigger", url, "ok", "--wait", "--timeout", "30")
    assert skipped.returncode == 1, skipped.stdout + skipped.stderr
    assert re.search(r"^skipped: another run of 'ok' was running \(overlap='skip'\): the manual run of 'ok' at slot"
                     r" \d+ did not start$", skipped.stdout, re.M), skipped.stdout  # fmt: skip
    assert store.finish("ok", held.slot_ms, held.token, "success")

    data = json.loads(cli("trigger", url, "ok", "--wait", "--timeout", "30", "--json").stdout)
    assert (data["result"], data["request"]["state"]) == ("success", "claimed")
    run = data["run"]
    assert (run["slot_ms"], run["reason"], run["status"]) == (data["request"]["slot_ms"], "manual", "success")
    [attempt] = run["attempts"]
    assert set(attempt) == {"number", "runner", "reason", "started_ms", "ended_ms", "outcome", "error",
                            "returned_ms", "returned", "returned_error"}  # fmt: skip
    assert attempt["returned"] is None  # rule 26: the finish reached the store, nothing else to record
    assert (attempt["number"], attempt["runner"], attempt["reason"], attempt["outcome"]) == (1, "web-1", "manual",
                                                                                         "success")  # fmt: skip


def test_trigger_wait_expiry_and_timeout(tmp_path: Path) -> None:
    """`trigger --wait` with no instance: a --timeout shorter than the request's life gives up: exit 1,
    the request still pending (and left so); with --max-late-ms 0 the request expires 10 s later:
    exit 1 saying no instance claimed it (`--json`: result and request state ``expired``, no run)."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = leasecron.open_store(url)
    store.jobs()  # the store exists
    gave_up = cli("trigger", url, "lonely", "--wait", "--timeout", "0.5", "--max-late-ms", "0")
    assert gave_up.returncode == 1, gave_up.stdout + gave_up.stderr
    assert re.search(r"^timeout: gave up waiting after 500 ms: the request is still pending; it goes on"
                     r" \(`leasecron show URL lonely \d+` shows it\)$", gave_up.stdout, re.M), gave_up.stdout
    assert [r.state for r in store.job_state("lonely").requests] == ["pending"]
    args = [sys.executable, "-m", "leasecron", "trigger", url, "lonely", "--wait", "--max-late-ms", "0"]
    procs = [subprocess.Popen(args + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for extra in ([], ["--json"])]  # fmt: skip
    (text, _), (as_json, errors) = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [1, 1], text + as_json + errors
    assert re.search(r"^expired: no instance claimed the request by .* UTC; is an instance that registers 'lonely'"
                     r" started\?$", text, re.M), text  # fmt: skip
    data = json.loads(as_json)
    assert (data["result"], data["request"]["state"], data["run"]) == ("expired", "expired", None)
    # Expiry is 10 s after the request was made; its slot is the store's clock then, moved 1 ms on
    # (rule 19) when the other command's request of the job took the same millisecond.
    assert data["request"]["slot_ms"] - data["request"]["expires_ms"] + 10_000 in (0, 1), data["request"]
    assert [r.state for r in store.job_state("lonely").requests] == ["expired"] * 3
    store.close()


# -- show and runs --------------------------------------------------------------------------------


def test_show_a_run_with_every_attempt(backend: Backend) -> None:
    """`show URL JOB SLOT`, SLOT as epoch ms or ISO 8601 (Z, an offset, none: UTC): every field of
    the run, its attempts in a table, each error in full; `--json` is the run's to_dict()."""
    store = backend.open()
    url = backend.url()
    run = takeover_run(store)
    moment = datetime.fromtimestamp(run.slot_ms / 1000, tz=timezone.utc)
    india = timezone(timedelta(hours=5, minutes=30))
    slots = [str(run.slot_ms), moment.strftime("%Y-%m-%dT%H:%M:%SZ"), moment.strftime("%Y-%m-%d %H:%M:%S"),
             moment.astimezone(india).isoformat()]  # fmt: skip
    outputs = set()
    for slot in slots:
        result = cli("show", url, "report", slot)
        assert result.returncode == 0, (slot, result.stderr)
        outputs.add(re.sub(r"\(.*? ago\)", "", result.stdout))
    assert len(outputs) == 1  # the same run, whatever the form of its slot
    out = result.stdout
    head = out.split("\n\n", 1)[0]
    fields = dict(re.findall(r"^(job|status|attempt|reason|runner|token|handed over)\s{2,}(.*)$", head, re.M))
    assert fields == {"job": "report", "status": "failed", "attempt": "2 (the current one)",
                      "reason": "takeover (why the current attempt started)", "runner": "web-2", "token": run.token,
                      "handed over": "no"}  # fmt: skip
    assert re.search(rf"^slot\s+{re.escape(utc_time(run.slot_ms, True))} UTC \(.*\), slot_ms {run.slot_ms}$", out, re.M)
    assert re.search(r"^error\s+RuntimeError: disk full\n\s+on /var/spool$", out, re.M), out
    attempts = parse_table(out.split("\n\n", 1)[1])
    assert [(a["attempt"], a["runner"], a["reason"], a["outcome"]) for a in attempts] == [
        ("1", "web-1", "schedule", "expired"), ("2", "web-2", "takeover", "failed")]  # fmt: skip
    assert "error of attempt 2:\n  RuntimeError: disk full\n    on /var/spool" in out
    assert "2 attempt(s), oldest first" in out

    data = json.loads(cli("show", url, "report", str(run.slot_ms), "--json").stdout)
    assert data == run.to_dict()
    assert [(a["number"], a["runner"], a["outcome"]) for a in data["attempts"]] == [
        (1, "web-1", "expired"), (2, "web-2", "failed")]  # fmt: skip


def test_show_errors(tmp_path: Path) -> None:
    """`show` with a SLOT that is neither ms nor ISO 8601: exit 2; a slot without a run: exit 1
    naming the job's newest slots."""
    store = leasecron.open_store(f"sqlite:///{tmp_path / 'c.db'}")
    run = takeover_run(store)
    url = f"sqlite:///{tmp_path / 'c.db'}"
    for slot in ("yesterday", "2026-13-01T00:00:00", "99999999999999999"):
        bad = cli("show", url, "report", slot)
        assert bad.returncode == 2, (slot, bad.stderr)
        [line] = bad.stderr.strip().splitlines()
        assert line.startswith("leasecron show: error: SLOT must be "), line
    missing = cli("show", url, "report", str(run.slot_ms + 1))
    assert missing.returncode == 1
    [line] = missing.stderr.strip().splitlines()
    assert f"no run of job 'report' at slot {run.slot_ms + 1}" in line and f"its newest: {run.slot_ms}" in line
    none = cli("show", url, "nothing", "0")
    assert none.returncode == 1 and "the job has no stored runs" in none.stderr
    store.close()


def test_runs_shows_the_attempt_chain(backend: Backend) -> None:
    """`runs` shows each run's attempts as a chain after a takeover: `1 web-1 expired → 2 web-2 failed`;
    `--json` holds every attempt."""
    store = backend.open()
    run = takeover_run(store)
    result = cli("runs", backend.url())
    assert result.returncode == 0, result.stderr
    [row] = parse_table(result.stdout)
    assert row["attempts"] == "1 web-1 expired → 2 web-2 failed"
    [data] = json.loads(cli("runs", backend.url(), "--json").stdout)
    assert data["attempts"] == [a.to_dict() for a in run.attempts]


class CountingStore(DelegatingStore):
    """Counts the calls of the job states, one and all."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: List[str] = []

    def _job_state(self, job: str) -> JobState:
        self.calls.append("job_state")
        return super()._job_state(job)

    def _job_states(self) -> List[JobState]:
        self.calls.append("job_states")
        return super()._job_states()


def test_jobs_reads_every_state_in_one_call() -> None:
    """`jobs` reads the pauses and requests of every job with one job_states() call, never one per job."""
    store = CountingStore(MemoryStore())
    for name in ("a", "b", "c"):
        store.pause(name, by="ops")
    store.request_run("b", by="ops")
    lines = commands.jobs_output(store, None, as_json=False)
    assert store.calls == ["job_states"]
    assert [(r["job"], r["paused"], r["pending"]) for r in parse_table("\n".join(lines))] == [
        ("a", "yes", "0"), ("b", "yes", "1"), ("c", "yes", "0")]  # fmt: skip


# -- the pure parts ---------------------------------------------------------------------------------


def test_parse_slot() -> None:
    """Epoch ms as it is; ISO 8601 with Z, an offset, or none (UTC), with or without milliseconds."""
    assert parse_slot("1764625203123") == 1_764_625_203_123
    for text in ("2025-12-01T21:40:03.123Z", "2025-12-01 21:40:03.123", "2025-12-01T22:40:03.123+01:00"):
        assert parse_slot(text) == 1_764_625_203_123, text
    assert parse_slot("1970-01-01") == 0
    for bad in ("", "-5", "1969-12-31T23:59:59Z", "soon", "9999999999999999"):
        with pytest.raises(leasecron.ConfigError, match="SLOT must be"):
            parse_slot(bad)


def _run_with(attempts: List[Attempt]) -> Run:
    last = attempts[-1]
    return Run(job="j", slot_ms=0, attempt=last.number, token="t", runner=last.runner, status="running",
               lease_end_ms=0, handed_over=False, reason=last.reason, error=None, started_ms=0, finished_ms=None,
               attempts=tuple(attempts))  # fmt: skip


def test_attempt_chain_of_a_long_run() -> None:
    """Up to 4 attempts in full; a longer chain: the first, how many are left out, the newest two."""
    attempts = [Attempt(n, f"w{n}", "takeover", n, n + 1, "expired") for n in range(1, 8)]
    assert attempt_chain(_run_with(attempts[:4])) == "1 w1 expired → 2 w2 expired → 3 w3 expired → 4 w4 expired"
    assert attempt_chain(_run_with(attempts)) == "1 w1 expired → (4 more) → 6 w6 expired → 7 w7 expired"
