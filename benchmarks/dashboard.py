"""The dashboard with many jobs: how long its pages take against the store reads they need.

    python benchmarks/dashboard.py [--store URL] [--jobs 10000] [--runs 100] [--repeat 20]

It fills a store (default: a fresh SQLite file in a temporary directory)
with ``--jobs`` jobs of ``--runs`` finished runs each, made through the
store's own operations (``claim_many`` of one slot of every job, then a
``finish`` of each run won, slot after slot), then asks the dashboard
(:func:`leasecron.contrib.dashboard.create_app`, through Flask's test client:
no network, no server) for its pages, each ``--repeat`` times, and prints the
median time of each beside two baselines measured in the same run:

* **reads**: the store calls the page makes, made directly (a page of jobs:
  ``now_ms``, ``jobs``, ``job_states`` and ``recent_runs`` of the page's 50
  jobs): the page's time over it is what rendering costs;
* **per job**: what the jobs page would cost with one ``runs(job, 30)`` per
  job of the page instead of one ``recent_runs``.

A ``--store`` other than the default keeps what it made: give it a store of
its own (a new SQLite file, a Redis prefix, a PostgreSQL ``schema=``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leasecron import Store, open_store  # noqa: E402
from leasecron.contrib.dashboard import create_app  # noqa: E402
from leasecron.stores import ClaimRequest  # noqa: E402

PER_PAGE = 50
MARKS = 30
#: Slots one second apart, ending a minute ago; claims of them are not late (max_late_ms below).
STEP_MS = 1000
YEAR_MS = 365 * 24 * 3600 * 1000


def fill(store: Store, jobs: int, runs: int) -> float:
    """Store ``runs`` finished runs of each of ``jobs`` jobs; returns the seconds it took."""
    began = time.perf_counter()
    names = [f"job-{i:05d}" for i in range(jobs)]
    first = store.now_ms() - 60_000 - runs * STEP_MS
    for r in range(runs):
        slot = first + r * STEP_MS
        for start in range(0, jobs, 256):
            batch = [
                ClaimRequest(name, slot, runner="filler", max_late_ms=YEAR_MS, history_size=runs)
                for name in names[start : start + 256]
            ]
            for claim in store.claim_many(batch):
                if not claim.won or claim.run is None:
                    raise SystemExit(f"filling: a claim of {batch[0].job}.. at {slot} answered {claim.outcome}")
                store.finish(claim.run.job, slot, claim.run.token, "success")
        print(f"  filled slot {r + 1}/{runs} ({time.perf_counter() - began:.0f} s)", end="\r", file=sys.stderr)
    print(file=sys.stderr)
    return time.perf_counter() - began


def median_ms(action: Callable[[], object], repeat: int) -> float:
    """The median of ``repeat`` timed calls of ``action``, in ms (after one untimed call)."""
    action()
    times: List[float] = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store URL (default: a fresh SQLite file)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=100, help="finished runs per job")
    parser.add_argument("--repeat", type=int, default=20, help="timed requests per page")
    args = parser.parse_args()
    url = args.store or f"sqlite:///{tempfile.mkdtemp(prefix='leasecron-dash-')}/dashboard.db"
    store = open_store(url)
    print(f"store {store!r}: {args.jobs} jobs x {args.runs} runs")
    print(f"filled in {fill(store, args.jobs, args.runs):.0f} s")
    client = create_app(store, refresh_ms=0).test_client()
    names = sorted(store.jobs())
    page_names = names[:PER_PAGE]
    last = store.runs(names[0], 1)[0]
    middle = max(1, len(names) // PER_PAGE // 2)

    def get(path: str) -> Callable[[], object]:
        def request() -> object:
            response = client.get(path)
            if response.status_code != 200:
                raise SystemExit(f"GET {path}: {response.status_code}")
            return response.data

        return request

    def page_reads() -> object:
        store.now_ms()
        store.jobs()
        store.job_states()
        return store.recent_runs(page_names, MARKS)

    def per_job_reads() -> object:
        store.now_ms()
        store.jobs()
        store.job_states()
        return [store.runs(name, MARKS) for name in page_names]

    reads = median_ms(page_reads, args.repeat)
    per_job = median_ms(per_job_reads, args.repeat)
    print(f"\nmedian of {args.repeat} requests; 'x reads' is the page's time over its store reads ({reads:.1f} ms)")
    print(f"{'what':44s} {'ms':>8s} {'x reads':>8s}")
    rows = [
        ("store reads of a jobs page (baseline)", reads),
        (f"the same with runs() per job ({PER_PAGE} calls)", per_job),
        ("GET / (page 1 of jobs)", median_ms(get("/"), args.repeat)),
        (f"GET /?page={middle} (the middle page)", median_ms(get(f"/?page={middle}"), args.repeat)),
        ("GET /?q=job-0999 (a search)", median_ms(get("/?q=job-0999"), args.repeat)),
        ("GET /api/jobs", median_ms(get("/api/jobs"), args.repeat)),
        (f"GET /jobs/{names[0]} ({args.runs} runs)", median_ms(get(f"/jobs/{names[0]}"), args.repeat)),
        ("GET a run's page", median_ms(get(f"/jobs/{names[0]}/runs/{last.slot_ms}"), args.repeat)),
    ]
    for what, ms in rows:
        print(f"{what:44s} {ms:8.1f} {ms / reads:8.2f}")
    store.close()


if __name__ == "__main__":
    main()
