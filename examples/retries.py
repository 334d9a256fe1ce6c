"""Timeouts and retries: a flaky API retried under the same lease, and a stuck export stopped by its limit.

    python retries.py    # asks for one run of each job now (a manual run), waits for both, prints how they ended
"""
import logging
import os
import threading

import leasecron

log = logging.getLogger("retries")
# catch_up_ms=0: no catch-up of a slot missed before start, so that only the manual runs below run
cron = leasecron.LeaseCron(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"), catch_up_ms=0)
calls = []  # the vendor API below fails its first call, as a flaky one does


def vendor_pages() -> list:
    calls.append(1)
    if len(calls) == 1:
        raise ConnectionError("vendor API: connection reset")
    return ["page 1", "page 2"]


@cron.job("*/15 * * * *", name="sync_invoices", timeout_ms=600_000, retries=3, retry_delay_ms=2_000)
def sync_invoices(ctx: leasecron.Context) -> None:
    if ctx.try_number > 1:
        log.info("try %d of slot %s", ctx.try_number, ctx.slot)
    for page in vendor_pages():
        ctx.signal.raise_if_aborted()  # stop, lost, or the 10-minute limit
        log.info("stored %s", page)


@cron.job("0 3 * * *", name="export", timeout_ms=5_000)
def export(ctx: leasecron.Context) -> None:
    while not ctx.signal.wait(0.1):  # a sleep that wakes up when the signal is aborted
        pass  # an export that never ends: at 5 s the limit aborts the signal, and the loop stops


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    ended = {}
    done = threading.Event()

    def record(event: leasecron.Event) -> None:
        ended[event.job] = f"{event.type} (try {event.try_number})" + (f": {event.error}" if event.error else "")
        if len(ended) == 2:
            done.set()

    cron.on("success", record)
    cron.on("failed", record)
    cron.start()
    cron.trigger("sync_invoices")  # now, rather than at the next quarter of an hour
    cron.trigger("export")
    done.wait(timeout=30)
    cron.stop()
    for job, outcome in sorted(ended.items()):
        print(f"{job}: {outcome}")
