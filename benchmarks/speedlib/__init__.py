"""The parts of the issue-14 ("Speed") measurements of ``benchmarks/scale.py`` and ``benchmarks/store_ops.py``.

* :mod:`speedlib.namespaces`: a store of its own on any kind of store (a new
  ``MemoryStore``, a temporary SQLite file, a Redis/Valkey key prefix, a
  PostgreSQL schema), removed at the end;
* :mod:`speedlib.poll`: ``scale.py --poll``: what the poll for requests of
  manual runs costs an instance and the store, at 1 to 10,000 jobs;
* :mod:`speedlib.baseline`: ``store_ops.py --baseline-ref REF``: the claims of
  an earlier commit beside today's, in one invocation.

Everything here imports ``store_ops`` from ``benchmarks/``, which is on
``sys.path`` when a script of ``benchmarks/`` runs.
"""
