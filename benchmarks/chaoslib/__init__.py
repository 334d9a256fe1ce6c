"""The chaos harness: real instance processes, injected faults, and a checker.

Layout (run from ``benchmarks/`` with ``PYTHONPATH=<repo>:<repo>/benchmarks``):

* ``worker.py``  — one instance process (``python -m chaoslib.worker``): five
  jobs on a :class:`~leasecron.LeaseCron` over a :class:`RecordingStore`
  (``recording.py``), appending JSON lines (claims, heartbeats, handler ticks,
  events) to a log;
* ``handlers.py`` — what each try of a job's handler does, from a seeded plan
  (one job runs past its ``timeout_ms``, one retries failed tries);
* ``sink.py``    — the jobs' side effect, a SQLite table that keeps the newest
  attempt of each slot;
* ``proxy.py``   — a TCP proxy between instances and a server store, to stall,
  slow down or reset their connections;
* ``nemesis.py`` — the faults (SIGKILL, SIGSTOP/SIGCONT, SIGTERM, restarts,
  stalls), each logged to ``nemesis.jsonl``;
* ``controls.py`` — the operator: pauses, resumes and triggers jobs at random
  through the store's API, each call and answer logged to ``operator.jsonl``;
* ``schedules.py`` — the operator's schedule changes: reschedules and resets the
  code's jobs, puts, replaces and deletes stored jobs (``Store.set_schedule``);
* ``instances.py`` — one instance process as the harness and nemesis handle it
  (incarnations, signals, whether it runs a handler);
* ``harness.py`` — starts the store, the instances, the nemesis and the
  operator, and collects the logs and the store's final records
  (``summary.py``: the run's numbers);
* ``checker/`` — pure analysis of those logs and records: a count and the
  violations of each invariant, the takeover and hand-over delays, and whether
  the faults were effective.

``benchmarks/chaos.py`` is the command line that ties them together.
"""
