"""The README's quickstart: two jobs on one store, run until SIGTERM or SIGINT.

Start it on as many hosts or processes as you like, all on the same store:
each slot of each job runs exactly once, on one of them.
"""

import logging
import os

import leasecron

log = logging.getLogger("quickstart")

store = leasecron.open_store(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))
cron = leasecron.LeaseCron(store)  # runner: "<hostname>-<pid>"


@cron.job("* * * * * */2", name="report")  # every 2 s (a sixth field: seconds)
def report(ctx: leasecron.Context) -> None:
    for row in range(3):
        ctx.signal.raise_if_aborted()  # stop early when asked to: a backup takes over
        log.info("report %s: row %d of slot %s", ctx.job, row, ctx.slot)


def cleanup() -> None:
    log.info("nightly cleanup")


cron.add_job(cleanup, "0 6 * * *", name="nightly", lease_ms=60_000)
cron.on("lost", lambda event: log.warning("lost %s", event.job))

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cron.run_forever()  # runs until SIGTERM/SIGINT, then hands live runs over
