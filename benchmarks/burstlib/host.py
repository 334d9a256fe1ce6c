"""This host's CPU, and the store server's, sampled while a burst runs.

The machine is shared (other test runs, the store's server): a burst's lag
means little without the CPU the rest took meanwhile. :class:`HostSampler`
reads, every :data:`SAMPLE_S` in a thread of its own, the CPU time of the
whole host (``/proc/stat``) and of the store's server (Redis/Valkey: ``INFO
cpu`` of each node, the server's own figure; PostgreSQL: every ``postgres``
process of this host, other sessions' included, from ``/proc/<pid>/stat``;
SQLite has no server: the instances do its work). :meth:`HostSampler.over`
then gives what they used between two instants of this host's clock, and
:meth:`HostSampler.window` that with the load average before and after;
:func:`host_line` says it in one line, as ``burst.py`` and ``fire_lag.py``
print it under each figure they measure; :func:`server_cpu_of` finds the
reader of a store's server (``fire_lag.py``, which opens a store from a URL).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from redis.cluster import RedisCluster

from leasecron import Store
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore

#: How often the sampler reads the counters, in seconds.
SAMPLE_S = 0.25
_TICKS = os.sysconf("SC_CLK_TCK")


def host_cpu() -> Tuple[float, float]:
    """(busy, total) CPU seconds of every core of this host since boot (``/proc/stat``; iowait is idle)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return (total - idle) / _TICKS, total / _TICKS


def postgres_cpu() -> float:
    """User + system CPU seconds of every ``postgres`` process of this host (0 where none is seen)."""
    seconds = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        if name.startswith("postgres"):
            fields = stat[stat.rfind(")") + 2 :].split()
            seconds += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    return seconds


def redis_cpu(clients: List[Any]) -> Callable[[], float]:
    """A reader of the CPU seconds (``used_cpu_user`` + ``used_cpu_sys``) the servers of ``clients``
    (redis-py clients, one per node) report."""

    def read() -> float:
        total = 0.0
        for client in clients:
            if isinstance(client, RedisCluster):  # every node's INFO, by node
                infos: Sequence[Any] = list(client.info("cpu", target_nodes=RedisCluster.ALL_NODES).values())
            else:
                infos = [client.info("cpu")]
            for info in infos:
                total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return total

    return read


def server_cpu_of(store: Store) -> Tuple[Optional[Callable[[], float]], str]:
    """The reader of the CPU seconds of ``store``'s server and what it covers, for
    :class:`HostSampler`: on Redis/Valkey the ``INFO cpu`` of the server (every node of a cluster),
    read through the store's own client; on PostgreSQL every ``postgres`` process of this host;
    (None, "") where there is no server (SQLite, memory)."""
    if isinstance(store, RedisStore):
        nodes = "the servers' INFO cpu" if isinstance(store.client, RedisCluster) else "the server's INFO cpu"
        return redis_cpu([store.client]), nodes
    if isinstance(store, PostgresStore):
        return postgres_cpu, "every postgres process of this host"
    return None, ""


def shares(host: Dict[str, Any], instances_cpu_s: Optional[float]) -> Optional[Dict[str, float]]:
    """The busy cores of a window (:meth:`HostSampler.window`) shared out: ``instances`` (their CPU
    seconds over it, ``instances_cpu_s``, per second), ``server`` (where its CPU is read) and
    ``else``, the rest of the machine; None if the window was not sampled."""
    if not host.get("busy_cores") or instances_cpu_s is None:
        return None
    found = {"instances": instances_cpu_s / host["span_s"]}
    if "server_cpu_s" in host:
        found["server"] = host["server_cpu_s"] / host["span_s"]
    found["else"] = max(host["busy_cores"] - sum(found.values()), 0.0)
    return found


def host_line(host: Dict[str, Any], instances_cpu_s: Optional[float]) -> Optional[str]:
    """One line on this host over a window (:meth:`HostSampler.window`): the cores busy, of which
    the instances, the store's server and everything else (:func:`shares`), and the load average
    at the end; None if the window was not sampled."""
    cores = shares(host, instances_cpu_s)
    if cores is None:
        return None
    parts = [f"the instances {cores['instances']:.2f}"]
    if "server" in cores:
        parts.append(f"the store's server {cores['server']:.2f} ({host['server_is']})")
    parts.append(f"everything else {cores['else']:.2f}")
    load = " ".join(f"{x:.2f}" for x in host.get("load_after", []))
    return (
        f"  this host over the window ({host['span_s']:.1f} s): {host['busy_cores']:.2f} of {host['cores']}"
        f" cores busy: {', '.join(parts)}; load average at the end {load}"
    )


class HostSampler:
    """Samples (wall time, host busy s, host total s, server CPU s) until :meth:`stop`."""

    def __init__(self, server_cpu: Optional[Callable[[], float]], what: str) -> None:
        #: what the server's CPU figure covers (printed beside it)
        self.what = what
        self._server_cpu = server_cpu
        self._samples: List[Tuple[float, float, float, Optional[float]]] = []
        self._stop = threading.Event()
        self._error: Optional[str] = None
        self._thread = threading.Thread(target=self._run, name="burst-host-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        busy, total = host_cpu()
        server = None
        if self._server_cpu is not None and self._error is None:
            try:
                server = self._server_cpu()
            except Exception as exc:  # noqa: BLE001 - the figure is left out, the burst goes on
                self._error = f"{type(exc).__name__}: {exc}"
        self._samples.append((time.time(), busy, total, server))

    def _run(self) -> None:
        self._sample()
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def stop(self) -> None:
        """Take a last sample and end the thread."""
        self._stop.set()
        self._thread.join()
        self._sample()

    def over(self, start_s: float, end_s: float) -> Dict[str, Any]:
        """Between the samples nearest ``start_s`` and ``end_s`` (host wall clock): the host's busy
        cores (mean over the span) and the server's CPU seconds; empty if not sampled."""
        samples = list(self._samples)
        if len(samples) < 2:
            return {}
        first = min(samples, key=lambda s: abs(s[0] - start_s))
        last = min(samples, key=lambda s: abs(s[0] - end_s))
        span = last[0] - first[0]
        if span <= 0 or last[2] <= first[2]:
            return {}
        cores = os.cpu_count() or 1
        found: Dict[str, Any] = {
            "span_s": round(span, 2),
            "cores": cores,
            "busy_cores": round(cores * (last[1] - first[1]) / (last[2] - first[2]), 2),
        }
        if first[3] is not None and last[3] is not None:
            found["server_cpu_s"] = round(last[3] - first[3], 2)
            found["server_is"] = self.what
        elif self._error:
            found["server_error"] = self._error
        return found

    def window(self, start_s: float, span_s: float, load_before: Sequence[float]) -> Dict[str, Any]:
        """:meth:`over` from ``start_s`` for ``span_s`` seconds, with the load average before
        (``load_before``, read as the run began) and now."""
        return {
            **self.over(start_s, start_s + span_s),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        }
