"""The Instances page (``/instances``) and ``GET /api/instances``: the live instances, and what each registers.

Each started instance announces itself in the store (:mod:`leasecron.announcements`): its runner,
host, pid, leasecron version, start and last refresh on the store's clock, and the jobs (with the
schedules of its code) and tasks it registers. Both routes read them in two store calls
(``now_ms``, ``instances``), as ``leasecron instances`` does. They are reads: a read-only
dashboard serves them too, and a password guards them as it guards every page.
"""

from __future__ import annotations

from typing import List, Tuple

from flask import Blueprint, Response, jsonify

from ...announcements import LiveInstance
from ...formatting import format_duration
from ...stores import Store
from .settings import Settings
from .views import page

__all__ = ["add_instances", "read_instances"]


def read_instances(store: Store) -> Tuple[int, List[LiveInstance]]:
    """The store's clock and its live instances, oldest start first: two store calls."""
    now_ms = store.now_ms()
    return now_ms, store.instances()


def add_instances(bp: Blueprint, settings: Settings) -> None:
    """Add the Instances page (``instances``) and ``GET /api/instances`` (``api_instances``) to ``bp``."""

    def instances() -> Response:
        now_ms, live = read_instances(settings.store)
        ttl = format_duration(settings.store.instance_ttl_ms)
        return page(settings, "instances.html", instances=live, now_ms=now_ms, ttl=ttl)

    def api_instances() -> Response:
        now_ms, live = read_instances(settings.store)
        return jsonify({"now_ms": now_ms, "instances": [instance.to_dict() for instance in live]})

    bp.add_url_rule("/instances", "instances", instances)
    bp.add_url_rule("/api/instances", "api_instances", api_instances)
