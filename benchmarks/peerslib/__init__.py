"""The parts of ``benchmarks/peers.py``: leasecron beside APScheduler 3, APScheduler 4 and celery beat with RedBeat.

* :mod:`peerslib.aps_process`: the APScheduler 3 process (``peers.py --instance``):
  a ``BackgroundScheduler`` on a shared ``SQLAlchemyJobStore`` whose job notes
  its start, and the listener that pairs each run with its scheduled time;
* :mod:`peerslib.aps4_process`: the APScheduler 4 process (a script run by its
  own environment's Python): a ``Scheduler`` on a shared
  ``SQLAlchemyDataStore`` and event broker, for the table and for recovery;
* :mod:`peerslib.redbeat_beat`: a ``celery beat`` process with RedBeat (a
  script run by the celery environment's Python), for recovery;
* :mod:`peerslib.child`: what those two scripts share (stdlib only): the
  parent's protocol, the CPU window, the output format;
* :mod:`peerslib.venvs`: the virtual environments of APScheduler 4 and of
  celery + celery-redbeat, made on first use in a cache directory;
* :mod:`peerslib.systems`: the table's systems (a scheduler on a store), their
  namespaces (a temporary SQLite file, PostgreSQL schemas, APScheduler's
  tables) made and removed, and each one's process command line; leasecron's
  processes are ``fire_lag.py``'s instances;
* :mod:`peerslib.figures`: runs per slot, fire lag and CPU per system from the
  processes' logs (read by ``fire_lag.read_report``), the ratios against
  leasecron on the same store, and the table;
* :mod:`peerslib.recovery`: recovery after a SIGKILL: the leasecron process
  (``peers.py --recovery-instance``), the systems and their namespaces;
* :mod:`peerslib.recovery_run`: the recovery run itself: the kills, the
  times, the ratios against leasecron, and the second table;
* :mod:`peerslib.report`: the header above the tables, the JSON, and the
  peers' environments asked of :mod:`peerslib.venvs`.

``peers.py`` runs all the systems' processes at once and prints the figures.
Everything here imports ``fire_lag`` and ``speedlib`` from ``benchmarks/``,
which is on ``sys.path`` when ``peers.py`` runs as a script (not ``child``,
``aps4_process`` and ``redbeat_beat``, which run without leasecron).
"""

from __future__ import annotations

import sys
import time

_T0 = time.monotonic()

#: The job's name in leasecron (``fire_lag.py``'s first steady job) and its id in APScheduler.
LEASECRON_JOB, APS_JOB = "job0", "tick"
#: The job of the recovery measurement (leasecron).
RECOVERY_JOB = "recover"
#: The schedulers' names, as the tables show them.
LEASECRON, APSCHEDULER, APSCHEDULER4, REDBEAT = "leasecron", "APScheduler 3", "APScheduler 4", "celery beat + RedBeat"


def say(message: str) -> None:
    """A progress line on stderr, with the seconds since the start."""
    print(f"peers: [{time.monotonic() - _T0:5.1f} s] {message}", file=sys.stderr, flush=True)
