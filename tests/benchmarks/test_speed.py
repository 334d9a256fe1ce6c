"""Smoke tests of issue 14's measurements: ``benchmarks/scale.py --poll`` and
``benchmarks/store_ops.py --baseline-ref``, run as a user runs them, small.

They check what the scripts promise: every job count and state gets its row,
the figures are numbers, the first job count is its own baseline, the two
versions compared are the code they say, and nothing is left behind (the
temporary directory, the Redis keys, the PostgreSQL schemas). No timing is
asserted, so the three ``--poll`` runs, which mostly wait (10 s for the requests they
seed to expire), go at once (:class:`PollRuns`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import psycopg2
import pytest
import redis

from tests.at_once import StartedAtOnce, ended, start_logged, wait_or_fail
from tests.conftest import SERVERS, selected_items

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SMALL_POLL = ["--poll", "--poll-jobs", "1,30", "--poll-ms", "50", "--poll-seconds", "0.5", "--history", "1",
              "--pending", "3", "--poll-rounds", "1", "--poll-calls", "5"]  # fmt: skip


def run(script: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The script with ``args``, its temporary files under ``tmp_path``."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, env=env, timeout=170
    )


class PollRuns(StartedAtOnce[Tuple["subprocess.Popen[str]", Path, Path]]):
    """The ``scale.py --poll`` runs of this module's selected tests, all started at the first test's call.

    Each run gets a temporary directory of its own (its ``TMPDIR``, which it must leave empty) and
    its output in files beside it; each test then waits for its own run. A store that cannot be
    reached (no server) fails or skips its own test.
    """

    #: The tests that ask, and the store kind of each (the parameter ``kind`` where there is one).
    TESTS = {"test_poll_prints_every_job_count_and_state_on_sqlite": "sqlite",
             "test_poll_on_a_server_leaves_nothing_behind": None}  # fmt: skip

    def selected(self) -> List[str]:
        """The store kinds of this module's tests of ``--poll`` that run in this session."""
        return [kind or item.callspec.params["kind"]
                for test, kind in self.TESTS.items() for item in selected_items(self._request, test)]  # fmt: skip

    @staticmethod
    def url(kind: str) -> str:
        """The ``--store`` of ``kind``: sqlite, or the session's Redis or PostgreSQL."""
        if kind == "redis":
            host, port = SERVERS.redis()
            return f"redis://{host}:{port}/0"
        if kind == "postgresql":
            host, port, dbname = SERVERS.postgres()
            return f"postgresql://{host}:{port}/{dbname}"
        return kind

    def launch(self, kind: str) -> Tuple["subprocess.Popen[str]", Path, Path]:
        url = self.url(kind)
        tmp = self._tmp_path_factory.mktemp(f"poll-{kind}")
        out = self._tmp_path_factory.mktemp(f"poll-{kind}-output")
        argv = [sys.executable, str(BENCHMARKS / "scale.py"), *SMALL_POLL, "--store", url]
        return start_logged(argv, out, env={**os.environ, "TMPDIR": str(tmp)}), tmp, out

    def result(self, kind: str) -> Tuple[subprocess.CompletedProcess, Path]:
        """The finished run of ``kind`` (the first call starts every run) and its temporary directory."""
        proc, tmp, out = self.started(kind)
        wait_or_fail(proc, 170, f"scale.py --poll on {kind}")
        return ended(proc, out), tmp


@pytest.fixture(scope="module")
def poll_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PollRuns]:
    """The module's :class:`PollRuns`."""
    with closing(PollRuns(request, tmp_path_factory)) as runs:
        yield runs


def rows(stdout: str, first: str) -> Dict[str, List[str]]:
    """The first line whose first cell is each job count or operation ``first`` (a regex) names: its other cells."""
    found: Dict[str, List[str]] = {}
    for line in stdout.splitlines():
        match = re.match(rf"\s*({first})\s+(\S.*)$", line)
        if match:
            found.setdefault(match.group(1), match.group(2).split())
    return found


def poll_tables(stdout: str) -> List[Dict[str, List[str]]]:
    """The two tables of ``--poll``: the timing table and the instance table, by job count."""
    timing, instance = stdout.split("an instance with the jobs registered", 1)
    return [rows(timing, r"1|30"), rows(instance, r"1|30")]


def test_poll_prints_every_job_count_and_state_on_sqlite(poll_runs: PollRuns) -> None:
    """scale.py --poll on SQLite: a timing row and an instance row per job count, the statements a
    call sent counted, the first count its own baseline, the temporary directory removed."""
    proc, tmp_path = poll_runs.result("sqlite")
    assert proc.returncode == 0, proc.stderr
    timing, instance = poll_tables(proc.stdout)
    assert sorted(timing) == ["1", "30"] and sorted(instance) == ["1", "30"], proc.stdout
    # jobs | runs, ended requests, write s, then (us, x 1st) per state, then the statements per state
    assert timing["30"][:2] == ["60", "30"], proc.stdout  # 1 scheduled + 1 manual run per job; its request ended
    assert [timing["1"][4], timing["1"][6]] == ["1.00", "1.00"], proc.stdout
    assert re.fullmatch(r"\d+\.\d\d / \d+\.\d\d", " ".join(timing["1"][7:])), proc.stdout  # statements per call
    for cells in instance.values():
        assert int(cells[1]) > 0 and float(cells[2]) > 0, proc.stdout  # polls, period ms
    assert "one store call per poll_ms per instance, whatever the number of jobs:" in proc.stdout
    assert list(tmp_path.iterdir()) == [], "the temporary directory was not removed"


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_poll_on_a_server_leaves_nothing_behind(kind: str, poll_runs: PollRuns) -> None:
    """scale.py --poll on Redis and PostgreSQL: rows for every job count (PostgreSQL: the vacuumed
    state too), and each job count's key prefix or schema gone at the end."""
    proc, _ = poll_runs.result(kind)
    url = PollRuns.url(kind)
    assert proc.returncode == 0, proc.stderr
    timing, instance = poll_tables(proc.stdout)
    assert sorted(timing) == ["1", "30"] and sorted(instance) == ["1", "30"], proc.stdout
    assert ("vacuumed us" in proc.stdout) == (kind == "postgresql"), proc.stdout
    names = re.findall(r"(?:key prefix|schema) (leasecron_poll_\d+_\d+)", proc.stderr)
    assert len(set(names)) == 2, proc.stderr
    for name in set(names):
        if kind == "redis":
            client = redis.Redis.from_url(url)
            assert list(client.scan_iter(match=f"{name}:*")) == [], f"keys left under {name}"
            client.close()
        else:
            conn = psycopg2.connect(url)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT to_regnamespace(%s) IS NULL", (name,))
                    assert cur.fetchone()[0], f"schema {name} left behind"
            finally:
                conn.close()


def test_baseline_ref_compares_head_with_the_working_tree(tmp_path: Path) -> None:
    """store_ops.py --baseline-ref HEAD: the commit and the working tree, each operation's two p50s
    and its after/before, the targets, and no temporary file left."""
    head = subprocess.run(["git", "-C", str(BENCHMARKS), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    proc = run("store_ops.py", "--baseline-ref", "HEAD", "--ops", "20", "--rounds", "1", "--threads", "1",
               tmp_path=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"^before: {head}\w* .*from git archive\)$", proc.stdout, re.M), proc.stdout
    assert re.search(rf"^after:  the working tree {re.escape(str(BENCHMARKS.parent))}\b", proc.stdout, re.M)
    ops = r"bare round trip|claim \(won\)|claim \(running\)|heartbeat|finish|release"
    table = rows(proc.stdout, ops)
    assert sorted(table) == sorted(re.sub(r"\\", "", ops).split("|")), proc.stdout
    for op, cells in table.items():
        before, after, ratio = (float(c) for c in cells[:3])
        assert before > 0 and after > 0 and ratio > 0, proc.stdout
        if op != "bare round trip":  # what one operation sent, before -> after
            assert re.fullmatch(r"\d+\.\d\d -> \d+\.\d\d", " ".join(cells[-3:])), proc.stdout
    assert re.search(r"^target: .*claim \(won\) \d+\.\d+ (met|MISSED); claim \(running\)", proc.stdout, re.M)
    assert list(tmp_path.iterdir()) == [], "the temporary directory was not removed"


def test_an_unknown_baseline_ref_is_refused_with_git_s_message(tmp_path: Path) -> None:
    """A ref git does not know ends the run at once, saying so."""
    proc = run("store_ops.py", "--baseline-ref", "no-such-ref-14", tmp_path=tmp_path)
    assert proc.returncode == 1 and "no-such-ref-14" in proc.stderr, proc.stderr


def test_a_server_url_needs_poll(tmp_path: Path) -> None:
    """scale.py's idle window runs on memory or SQLite only: a URL without --poll is refused."""
    proc = run("scale.py", "--store", "redis://127.0.0.1:6379/0", tmp_path=tmp_path)
    assert proc.returncode == 2 and "--store must be memory or sqlite" in proc.stderr, proc.stderr
