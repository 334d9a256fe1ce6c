"""The parts of ``fire_lag.py`` and ``burst.py`` that need no store: the thread profiles of
``--profile`` (``burstlib/threads.py``, ``burstlib/profiles.py``), the summary of ``--repeat``
(``speedlib/repeats.py``) and the host's line (``burstlib/host.py``)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from burstlib.host import host_line, shares  # noqa: E402
from burstlib.threads import ThreadProfiles  # noqa: E402
from burstlib.profiles import print_profiles  # noqa: E402
from speedlib.repeats import print_repeats, summarize  # noqa: E402


@pytest.fixture
def profiles(tmp_path: Path) -> Iterator[ThreadProfiles]:
    """A :class:`ThreadProfiles` writing into ``tmp_path``; threads are no longer profiled after the test."""
    found = ThreadProfiles(str(tmp_path))
    try:
        yield found
    finally:
        found.close()


def _ran(name: str, work: int) -> None:
    thread = threading.Thread(target=lambda: sum(range(work)), name=name)
    thread.start()
    thread.join()


def test_a_thread_idle_since_the_mark_gets_no_profile_and_a_bad_file_is_skipped(
    profiles: ThreadProfiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """burst.py --profile once crashed in pstats on an empty profile: a thread that counted nothing
    since the mark (it ended before) gets no file, one that worked since does, and print_profiles
    skips (and counts) a file pstats cannot read instead of failing."""
    _ran("leasecron-run-ended", 10_000)
    profiles.mark()
    _ran("leasecron-run-after", 200_000)
    profiles.write()
    written = sorted(path.name.split("-", 1)[1] for path in tmp_path.glob("*.prof"))
    assert written == ["1-workers.prof"] and profiles.empty == 1, (written, profiles.empty)
    (tmp_path / "1-9-workers.prof").write_bytes(b"")  # cut short: what a reader met
    (tmp_path / "1-8-scheduler.prof").write_bytes(b"\x00not marshal")
    print_profiles(str(tmp_path))
    out = capsys.readouterr().out
    assert "    workers: 1 threads," in out, out
    assert "builtins.sum" in out, out
    assert "scheduler" not in out.split("skipped")[0], out
    assert "(2 profile files skipped, empty or unreadable:" in out, out


def test_repeats_give_each_figures_median_range_and_runs_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    """--repeat's summary: per figure the median, min and max of the runs that have it, and every
    run's value in the order run (None where one has none), in the first run's order of figures."""
    runs = [{"p99, ms": 30.0, "calls": 1.2}, {"p99, ms": 90.0, "calls": None}, {"p99, ms": 40.0, "calls": 1.1}]
    found = summarize(runs)
    assert list(found) == ["p99, ms", "calls"]
    assert found["p99, ms"] == {"median": 40.0, "min": 30.0, "max": 90.0, "runs": [30.0, 90.0, 40.0]}
    assert found["calls"] == {"median": 1.15, "min": 1.1, "max": 1.2, "runs": [1.2, None, 1.1]}
    print_repeats("steady", runs)
    out = capsys.readouterr().out
    assert "steady, 3 runs: the median and range (min-max)" in out, out
    assert [line.split() for line in out.splitlines()[-2:]] == [
        ["p99,", "ms", "40.0", "30.0-90.0", "30.0", "90.0", "40.0"],
        ["calls", "1.15", "1.10-1.20", "1.20", "-", "1.10"],
    ], out


def test_the_host_line_shares_the_busy_cores_out() -> None:
    """The busy cores of a window: the instances' CPU, the server's, and the rest; no line when
    the window was not sampled or the instances' CPU is not known."""
    host = {"span_s": 10.0, "cores": 2, "busy_cores": 1.5, "server_cpu_s": 3.0, "server_is": "INFO cpu",
            "load_after": [1.25, 0.5, 0.25]}  # fmt: skip
    assert shares(host, 4.0) == pytest.approx({"instances": 0.4, "server": 0.3, "else": 0.8})
    line = host_line(host, 4.0)
    assert line == (
        "  this host over the window (10.0 s): 1.50 of 2 cores busy: the instances 0.40, the store's"
        " server 0.30 (INFO cpu), everything else 0.80; load average at the end 1.25 0.50 0.25"
    )
    assert shares({**host, "busy_cores": 0.5}, 4.0) == pytest.approx({"instances": 0.4, "server": 0.3, "else": 0.0})
    assert host_line({}, 4.0) is None and host_line(host, None) is None
