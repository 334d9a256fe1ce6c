"""``leasecron instances URL [--json]``: the live instances, and what each registers.

Each started instance announces itself in the store (:mod:`leasecron.announcements`): its runner,
host, pid, leasecron version, start and last refresh on the store's clock, and the jobs (with the
schedules of its code) and tasks it registers. This command reads them in one store call and
prints them; ``flask leasecron instances`` prints the same of the app's store.
"""

from __future__ import annotations

import argparse
import json
from typing import List

from ..announcements import LiveInstance
from ..formatting import format_duration, utc_time
from ..stores import Store, open_store
from .commands import reading
from .tables import format_table

__all__ = ["cmd_instances", "instances_output"]

HEADERS = ["runner", "host", "pid", "version", "started (UTC)", "seen", "jobs", "tasks"]


def cmd_instances(args: argparse.Namespace) -> int:
    """``leasecron instances URL [--json]``."""
    with open_store(args.url, create=False) as store:
        for line in instances_output(store, args.json):
            print(line)
    return 0


def instances_output(store: Store, as_json: bool) -> List[str]:
    """The lines ``instances`` prints: a table of the live instances, then what each registers
    (``as_json``: a JSON list of them, as :meth:`LiveInstance.to_dict` gives each). Creates nothing."""
    with reading(store):
        now_ms = store.now_ms()
        live = store.instances()
    if as_json:
        return [json.dumps([instance.to_dict() for instance in live], indent=2)]
    if not live:
        return [
            f"No live instance in {store!r}: none has announced itself in the last"
            f" {format_duration(store.instance_ttl_ms)} (a started instance does, every 10 s)"
        ]
    cells = [
        [
            i.runner, i.announcement.host, str(i.announcement.pid), i.announcement.version,
            utc_time(i.started_ms), f"{format_duration(max(0, now_ms - i.seen_ms))} ago",
            str(len(i.announcement.jobs)), str(len(i.announcement.tasks)),
        ]
        for i in live
    ]  # fmt: skip
    lines = format_table(HEADERS, cells, align="lllr")
    for instance in live:
        lines += [""] + _registers(instance)
    lines.append("")
    lines.append(
        f"{len(live)} live instance(s) in {store!r}: each refreshes its announcement every 10 s; a stopped"
        f" one is removed, a killed one ages out {format_duration(store.instance_ttl_ms)} after its last"
    )
    return lines


def _registers(instance: LiveInstance) -> List[str]:
    said = instance.announcement
    lines = [f"{instance.runner} registers {len(said.jobs)} job(s) in code and {len(said.tasks)} task(s):"]
    width = max((len(job.name) for job in said.jobs), default=0)
    for job in said.jobs:
        zone = "" if job.tz == "UTC" else f" ({job.tz})"
        lines.append(f"  job   {job.name.ljust(width)}  {job.schedule}{zone}")
    for task in said.tasks:
        lines.append(f"  task  {task}")
    return lines
