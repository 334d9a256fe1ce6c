"""The test project's jobs: found by autodiscovery when the apps are ready."""

import os
import threading

from django.db import connection

from leasecron import Context
from leasecron.contrib.django import cron

from .models import Tick

#: Seconds between two slots of shop.tick (the tests set it; an hour by default).
EVERY = float(os.environ.get("SHOP_EVERY", "3600"))


def _record(ctx: Context, note: str = "") -> None:
    was_open = connection.connection is not None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
    else:
        connection.ensure_connection()
        backend = id(connection.connection)
    Tick.objects.create(job=ctx.job, slot_ms=ctx.slot_ms, backend=backend, was_open=was_open,
                        thread=threading.get_ident(), note=note)  # fmt: skip


@cron.job(EVERY, name="shop.tick")
def tick(ctx: Context) -> None:
    """Record the run, through the ORM."""
    _record(ctx)


@cron.task("shop.greet")
def greet(ctx: Context, name: str = "world") -> None:
    """A task for stored jobs: records the run with ``hello NAME``."""
    _record(ctx, f"hello {name}")
