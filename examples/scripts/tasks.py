"""Cron jobs in a plain script: start a copy on every host, and each slot runs on one of them.

    leasecron run tasks:cron     # from this directory; or: python tasks.py

SIGTERM or Ctrl-C stops it: a running job is handed over to another copy.
A second signal stops at once.
"""
import logging
import os
import time

import leasecron

log = logging.getLogger("tasks")

# Every copy must share one store: a SQLite file on one host; redis://... or postgresql://... on several.
store = leasecron.open_store(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))

# stop() waits up to 20 s for running jobs: give the process manager's grace period more than that.
cron = leasecron.LeaseCron(store, stop_timeout_ms=20_000)


# Name each job: the default name holds the module, which is "__main__" under `python tasks.py`.
@cron.job("*/5 * * * *", name="report")
def report(ctx: leasecron.Context) -> None:
    for batch in range(5):
        ctx.signal.raise_if_aborted()  # stopping: raise Aborted, and another copy takes the run over
        log.info("report %s: batch %d, attempt %d", ctx.slot, batch, ctx.attempt)
        time.sleep(2)  # the work of one batch


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cron.run_forever()
