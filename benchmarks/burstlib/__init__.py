"""The parts of ``benchmarks/burst.py``: N jobs due at once on M instances, store by store (issue 16).

* :mod:`burstlib.stores`: the stores by kind (``cluster``, ``postgresql``,
  ``redis``, ``valkey``, ``sqlite``): a 3-master Redis Cluster or a Valkey
  server started for the run (``tests/servers.py``), or a namespace of the
  run's own on a server that is there (``fire_lag.py``'s), removed at the end;
* :mod:`burstlib.instance`: the instance process: ``fire_lag.py``'s, with a
  count of round trips that sees Redis pipelines, the warm-up's lead and the
  window's tail ``burst.py`` chose and, on request, a profile of each of its
  threads;
* :mod:`burstlib.figures`: the figures of one store's burst from what
  ``fire_lag.run_phase`` collected, the targets, and the summary table;
* :mod:`burstlib.host`: this host's CPU use while the burst is measured (the
  machine is shared: other processes' load is in the figures); ``fire_lag.py``
  prints its phases' host line with it too (``host.py`` imports no script);
* :mod:`burstlib.profiles`: ``--profile``: where the instances' threads spent
  their CPU over the window, by kind of thread.

Everything here imports ``fire_lag`` and ``speedlib`` from ``benchmarks/``, which is on
``sys.path`` when ``burst.py`` runs, and ``tests.servers`` from the repository's root, which
``burst.py`` puts there.
"""
