"""The parts of the speed measurements of ``benchmarks/store_ops.py``, ``scale.py`` and the other scripts.

* :mod:`speedlib.timing`: a batch of calls timed over one or more threads;
* :mod:`speedlib.counting`: what an operation costs the store, counted at
  the client (round trips, statements, transactions);
* :mod:`speedlib.bare`: the baselines, each store's cheapest round trip;
* :mod:`speedlib.operations`: one round of ``store_ops.py``, every store
  operation timed and counted;
* :mod:`speedlib.urls`: a store URL's query options, read and changed;
* :mod:`speedlib.pg_schema`: a PostgreSQL schema of the benchmark's own;
* :mod:`speedlib.sigterm`: SIGTERM as ``SystemExit``, so cleanups run;
* :mod:`speedlib.namespaces`: a store of its own on any kind of store (a new
  ``MemoryStore``, a temporary SQLite file, a Redis/Valkey key prefix, a
  PostgreSQL schema), removed at the end;
* :mod:`speedlib.poll`: ``scale.py --poll``: what the poll for requests of
  manual runs costs an instance and the store, at 1 to 10,000 jobs;
* :mod:`speedlib.baseline`: ``store_ops.py --baseline-ref REF``: the claims of
  an earlier commit beside today's, in one invocation.
* :mod:`speedlib.repeats`: ``fire_lag.py`` and ``burst.py --repeat N``: each
  headline figure's median and range over N runs.

The scripts of ``benchmarks/`` import these modules (``benchmarks/`` is on
``sys.path`` when one of them runs); nothing here imports a script.
"""
