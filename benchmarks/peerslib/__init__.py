"""The parts of ``benchmarks/peers.py``: leasecron beside APScheduler 3 on the same stores.

* :mod:`peerslib.aps_process`: the APScheduler process (``peers.py --instance``):
  a ``BackgroundScheduler`` on a shared ``SQLAlchemyJobStore`` whose job notes
  its start, and the listener that pairs each run with its scheduled time;
* :mod:`peerslib.systems`: the four systems (a scheduler on a store), their
  namespaces (a temporary SQLite file, a PostgreSQL schema, APScheduler's
  tables) made and removed, and each one's process command line; leasecron's
  processes are ``fire_lag.py``'s instances;
* :mod:`peerslib.figures`: runs per slot, fire lag and CPU per system from the
  processes' logs (read by ``fire_lag.read_report``), the ratios against
  leasecron on the same store, and the table.

``peers.py`` runs all the systems' processes at once and prints the figures.
Everything here imports ``fire_lag`` and ``store_ops`` from ``benchmarks/``,
which is on ``sys.path`` when ``peers.py`` runs as a script.
"""

from __future__ import annotations

import sys

#: The job's name in leasecron (``fire_lag.py``'s first steady job) and its id in APScheduler.
LEASECRON_JOB, APS_JOB = "job0", "tick"
#: The schedulers' names, as the table shows them.
LEASECRON, APSCHEDULER = "leasecron", "APScheduler"


def say(message: str) -> None:
    """A progress line on stderr."""
    print(f"peers: {message}", file=sys.stderr, flush=True)
