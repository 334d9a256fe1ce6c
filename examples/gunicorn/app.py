"""A Flask app whose job runs in its gunicorn workers: ``gunicorn -c gunicorn.conf.py app:app``.

Every worker, on every host, registers the same jobs; for each slot the store
lets one of them run it. gunicorn.conf.py starts ``cron`` in each worker after
the fork and stops it, handing live runs over, when the worker exits.
"""

import logging
import os
import time

from flask import Flask

import leasecron

logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(process)d] %(levelname)s %(message)s")
log = logging.getLogger("app")

app = Flask(__name__)
# Created at import, started by gunicorn.conf.py's post_fork hook: never call cron.start() here.
cron = leasecron.LeaseCron(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))


# Every second, on one worker. A job this frequent wants a takeover within the second
# (a backup checks every 1-2 heartbeats), no jitter, and each slot run even while the
# previous one still runs; the defaults suit jobs of minutes and hours.
@cron.job(1, name="tick", lease_ms=2_000, heartbeat_ms=100, jitter_ms=0, overlap="allow")
def tick(ctx: leasecron.Context) -> None:
    log.info("tick %d attempt %d (%s)", ctx.slot_ms, ctx.attempt, ctx.reason)
    for _ in range(6):  # 0.3 s of work, in steps
        if ctx.signal.aborted:  # the worker is stopping: hand the run over to another one
            log.info("tick %d aborted (%s)", ctx.slot_ms, ctx.signal.reason)
            raise leasecron.Aborted()
        time.sleep(0.05)
    log.info("tick %d done", ctx.slot_ms)


@app.get("/")
def index() -> dict:
    """This worker's cron, and the job's latest runs."""
    runs = cron.store.runs("tick", limit=5)
    return {"pid": os.getpid(), "cron": repr(cron), "runs": [run.to_dict() for run in runs]}
