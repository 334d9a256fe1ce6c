"""``burst.py --stored``: the N jobs are stored jobs of one task (schedules as data, issue 28).

The same burst, jobs and handler as without it, but no instance registers a
job in code: each registers the recorder's handler as the task
:data:`TASK` (``cron.task``), and the parent stores the N jobs ``burst<i>``
(the same names, the same twice-a-minute cron string, ``catch_up_ms=0``,
no kwargs) with the public ``Store.set_schedule``, from :data:`PUT_THREADS`
threads, once it knows the first slot and before it tells the instances, so
each instance loads all of them at its start (one ``schedule_changes``) and
recovers each (one ``unfinished`` read, as ``fire_lag``'s boot counts it).
Their claims carry the stored version (rule 23); the targets, and what counts
as a slot run once, are the same.

* :func:`stored_jobs` (the parent): ``fire_lag.Instances.send`` stores the
  jobs before it sends the first slot; on Redis and Valkey each job's
  schedule key and the changelog of stored schedules are deleted at the end
  (``fire_lag`` deletes the keys of the jobs' runs);
* :func:`register_task` (the instance): ``fire_lag.register_jobs``'s
  stand-in, set by ``burstlib.instance`` when :data:`STORED_ENV` is in its
  environment.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List

import fire_lag

from leasecron import LeaseCron, Store
from leasecron.options import resolve_options
from leasecron.stores.redis import RedisStore
from leasecron.stores.redis_scripts import changelog_keys, schedule_key

#: The environment variable that tells the instances their jobs are stored jobs.
STORED_ENV = "LEASECRON_BURST_STORED"
#: The task of every stored job.
TASK = "burst"
#: The parent's threads that store the jobs.
PUT_THREADS = 8


def burst_schedule(first_ms: int) -> str:
    """The jobs' cron string: the seconds of the warm-up slot ``first_ms`` and of the measured one
    ``fire_lag.BURST_WARMUP_S`` later, every minute (``fire_lag.register_jobs``'s)."""
    seconds = sorted({(first_ms // 1000) % 60, (first_ms // 1000 + fire_lag.BURST_WARMUP_S) % 60})
    return f"* * * * * {','.join(map(str, seconds))}"


def put_jobs(store: Store, names: List[str], first_ms: int) -> float:
    """Store every job of ``names`` as a stored job of :data:`TASK`; the seconds it took."""
    schedule = burst_schedule(first_ms)

    def put(name: str) -> None:
        store.set_schedule(name, by="burst", schedule=schedule, task=TASK, options={"catch_up_ms": 0})

    t0 = time.perf_counter()
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        for _ in pool.map(put, names, chunksize=64):
            pass
    return time.perf_counter() - t0


@contextmanager
def stored_jobs(store: Store, names: List[str]) -> Iterator[Dict[str, Any]]:
    """Meanwhile the first slot ``fire_lag.run_phase`` sends is preceded by the jobs' puts on
    ``store``; yields a dict that then holds ``put_s``, the puts' time, and the slot's lead
    left once they were done, ``lead_left_ms`` (the instances' time to start)."""
    noted: Dict[str, Any] = {}
    send = fire_lag.Instances.send

    def send_after_puts(instances: Any, message: Dict[str, Any]) -> None:
        if "first_slot_ms" in message:
            first = int(message["first_slot_ms"])
            noted["put_s"] = put_jobs(store, names, first)
            noted["lead_left_ms"] = first - store.now_ms()
        send(instances, message)

    fire_lag.Instances.send = send_after_puts  # type: ignore[method-assign]
    try:
        yield noted
    finally:
        fire_lag.Instances.send = send  # type: ignore[method-assign]
        if isinstance(store, RedisStore):
            pipe = store.client.pipeline(transaction=False)  # one key per DEL: keys of many cluster slots
            for key in [*changelog_keys(store.prefix), *(schedule_key(store.prefix, name) for name in names)]:
                pipe.delete(key)
            pipe.execute()


def register_task(cron: LeaseCron, recorder: Any, args: Any, first_ms: int) -> int:
    """The instance's side: the recorder's handler as the task :data:`TASK`; the jobs' heartbeat_ms
    (the library's default: the instances set no lease)."""
    cron.task(TASK)(recorder.handler)
    return resolve_options({}, {}).heartbeat_ms
