"""The app's jobs: imported when the apps are ready, as admin.py is."""
import logging
import time

import leasecron
from leasecron.contrib.django import cron

from .models import Tick

log = logging.getLogger(__name__)


# Every second, on one worker of all the gunicorns on the store. A job this frequent wants a takeover
# within the second (a backup checks every 1-2 heartbeats), no jitter, and each slot run even while
# the previous one still runs; the defaults suit jobs of minutes and hours.
@cron.job(1, name="ticks.tick", lease_ms=2_000, heartbeat_ms=100, jitter_ms=0, overlap="allow")
def tick(ctx: leasecron.Context) -> None:
    row = Tick.objects.create(slot_ms=ctx.slot_ms, attempt=ctx.attempt, reason=ctx.reason, runner=ctx.runner)
    log.info("tick %d attempt %d (%s)", ctx.slot_ms, ctx.attempt, ctx.reason)
    for _ in range(16):  # 0.8 s of work, in steps
        if ctx.signal.aborted:  # the worker is stopping: hand the run over to another one
            log.info("tick %d aborted (%s)", ctx.slot_ms, ctx.signal.reason)
            Tick.objects.filter(pk=row.pk).update(outcome="aborted")
            raise leasecron.Aborted()
        time.sleep(0.05)
    Tick.objects.filter(pk=row.pk).update(outcome="done")
    log.info("tick %d done", ctx.slot_ms)
