"""The quickstart: start it in several processes or on several hosts sharing one store.

Each 2-second slot of ``report`` runs in exactly one of them.
"""
import logging
import os

import leasecron

cron = leasecron.LeaseCron(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))


@cron.job("* * * * * */2", name="report")  # every 2 s (a sixth field: seconds)
def report(ctx: leasecron.Context) -> None:
    for row in range(3):
        ctx.signal.raise_if_aborted()  # stop early when asked to: a backup takes the run over
        logging.info("report of slot %s: row %d", ctx.slot, row)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cron.run_forever()  # until SIGTERM or Ctrl-C, then hands a live run over
