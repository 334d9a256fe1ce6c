"""One ``celery beat`` process with RedBeat, for ``peers.py``'s recovery measurement.

Run by the celery virtual environment's Python (``peerslib.venvs``), as a
script: it imports celery, celery-redbeat and ``child`` (next to it), never
leasecron. It runs beat as ``celery beat -S redbeat.RedBeatScheduler
--max-interval <s>`` does (``app.Beat(...).run()``, the same service in the
same process), with one entry in ``beat_schedule``: ``peers.tick`` every
second. No worker consumes it: what is measured is beat sending the task
(``after_task_publish`` in this process: one ``beat`` line to the parent per
message published on the broker, a Redis list named after the run).

Every key is the run's own: ``redbeat_key_prefix`` (the schedule, the
entry, the lock), and the queue (its exchange of the same name). Without
``--lock-timeout``, RedBeat's lock timeout is its default, 5 x the max
loop interval. ``lock`` tells the parent when this process got the lock
(RedBeat's ``beat_init`` receiver blocks until it does; this one is
connected after it). End of stdin: SIGTERM to itself, which is how beat
stops (it releases the lock).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # child.py, when imported as peerslib.redbeat_beat

import child  # noqa: E402 - after the path above

#: The task beat sends (nothing runs it).
TASK = "peers.tick"


def main(argv: Optional[List[str]] = None) -> int:
    """Say ready, wait for the parent's go, then run beat until told to stop."""
    p = argparse.ArgumentParser(description="peers.py's celery beat process (RedBeat)")
    p.add_argument("--redis", required=True, help="the Redis URL (RedBeat's and the broker's)")
    p.add_argument("--prefix", required=True, help="redbeat_key_prefix, also the queue's name prefix")
    p.add_argument("--max-interval", type=float, required=True, help="beat_max_loop_interval, seconds")
    p.add_argument("--lock-timeout", type=int, default=0, help="redbeat_lock_timeout (default: RedBeat's own)")
    p.add_argument("--index", type=int, default=0)
    args = p.parse_args(argv)
    child.keep_stdout_for_parent()
    stop = threading.Event()
    pipe = child.ControlPipe(stop)

    from celery import Celery
    from celery.signals import after_task_publish, beat_init

    import redbeat.schedulers  # noqa: F401 - connects RedBeat's beat_init receiver (the lock) before ours

    app = Celery("peers_redbeat", broker=args.redis)
    conf = {
        "redbeat_redis_url": args.redis, "redbeat_key_prefix": args.prefix,
        "beat_max_loop_interval": args.max_interval, "beat_schedule": {"tick": {"task": TASK, "schedule": 1.0}},
        "task_default_queue": f"{args.prefix}.queue", "timezone": "UTC", "broker_connection_retry_on_startup": True,
    }  # fmt: skip
    if args.lock_timeout:
        conf["redbeat_lock_timeout"] = args.lock_timeout
    app.conf.update(conf)

    @beat_init.connect
    def locked(sender: Any = None, **kwargs: Any) -> None:
        child.tell_parent("lock", wall_ns=time.time_ns(), lock_timeout=sender.scheduler.lock_timeout)

    @after_task_publish.connect
    def sent(sender: Any = None, headers: Any = None, **kwargs: Any) -> None:
        child.tell_parent("beat", wall_ns=time.time_ns(), task_id=(headers or {}).get("id"))

    child.tell_parent("ready", pid=os.getpid())
    if pipe.first() is None:
        return 0

    def on_stop() -> None:
        stop.wait()
        os.kill(os.getpid(), signal.SIGTERM)  # beat's own handler: sync, release the lock, exit

    threading.Thread(target=on_stop, name="stop-on-eof", daemon=True).start()
    child.tell_parent("booted", store_ms=time.time_ns() // 1_000_000)
    beat = app.Beat(scheduler="redbeat.RedBeatScheduler", max_interval=args.max_interval, loglevel="INFO", quiet=True)
    try:
        beat.run()
    except SystemExit:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
