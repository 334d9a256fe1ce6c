"""The chaos harness: real instance processes, injected faults, and a checker.

Layout (run from ``benchmarks/`` with ``PYTHONPATH=<repo>:<repo>/benchmarks``):

* ``worker.py``  — one instance process (``python -m chaoslib.worker``): three
  jobs on a :class:`~leasecron.LeaseCron` over a :class:`RecordingStore`,
  appending JSON lines (claims, heartbeats, handler ticks, events) to a log;
* ``proxy.py``   — a TCP proxy between instances and a server store, to stall,
  slow down or reset their connections;
* ``nemesis.py`` — the faults (SIGKILL, SIGSTOP/SIGCONT, SIGTERM, restarts,
  stalls), each logged to ``nemesis.jsonl``;
* ``harness.py`` — starts the store, the instances and the nemesis, and
  collects the logs and the store's final records;
* ``checker/`` — pure analysis of those logs and records: a count and the
  violations of each invariant, the takeover and hand-over delays, and whether
  the faults were effective.

``benchmarks/chaos.py`` is the command line that ties them together.
"""
