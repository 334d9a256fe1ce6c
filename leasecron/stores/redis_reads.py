"""How a :class:`~leasecron.stores.redis.RedisStore` calls the server, and its operations that only read.

:class:`RedisReads` is the base of ``RedisStore``: it holds the calls every
operation makes (one command, one script of a job's keys, a pipeline of
one script over many jobs, the index of pending requests) and the reads of
the contract, each as few round trips as the keys allow (the keys are laid
out in ``redis.py``'s docstring):

* ``runs``, ``unfinished``: one runs.lua call on the job's keys;
* ``recent_runs``: one pipeline of runs.lua calls, one per job: one round
  trip on a standalone server, one per node on a cluster (each call is told
  its node, see :meth:`~leasecron.stores.redis_scripts.Script.many`), and a
  server that lost its scripts answered by loading runs.lua once and
  sending its calls again;
* ``get_run``: one ``HGET``; ``job_state``: one state.lua call;
* ``jobs``, ``job_states``: ``SMEMBERS`` of a set of names, then one
  pipeline of plain commands (a cluster's pipeline takes no script);
* ``pending_requests``: one index.lua call.

Every redis-py error is raised as a :class:`~leasecron.StoreError` (or
:class:`~leasecron.StoreUnavailable`) naming what was being done.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..controls import JobState, ManualRequest
from ..runs import Run
from .base import Store
from .redis_scripts import Script, control_keys, job_keys, read_index, read_run, read_state, text
from .redis_server import store_error as _store_error

__all__ = ["RedisReads"]


def _runs_of(job: str, reply: Sequence[Any]) -> List[Run]:
    """The runs of runs.lua's ``reply`` (slot, run JSON, slot, run JSON, ...)."""
    return [read_run(job, reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]


class RedisReads(Store):
    """The calls and the reads of a Redis store; :class:`~leasecron.stores.redis.RedisStore` sets
    the attributes below and adds the operations that write."""

    #: The redis-py client (``redis.Redis`` or ``redis.cluster.RedisCluster``).
    client: Any
    #: What every key starts with.
    prefix: str
    #: The redis-py module (imported when the store is made: it is an optional extra).
    _redis: Any
    #: The store's scripts, by name (``redis_scripts.load_scripts``).
    _scripts: Dict[str, Script]
    #: The keys without a hash tag: the jobs with runs, the jobs ever controlled, the open requests.
    _jobs_key: str
    _controlled_key: str
    _pending_key: str

    # -- calls -------------------------------------------------------------------

    def _call(self, doing: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._redis.exceptions.RedisError as exc:
            raise _store_error(self._redis, exc, doing) from exc

    def _script(self, name: str, job: str, *args: Union[str, int]) -> Any:
        script = self._scripts[name]
        try:  # as _call, with the message made only on an error
            return script(self.client, script.job_keys(self.prefix, job), args)
        except self._redis.exceptions.RedisError as exc:
            raise _store_error(self._redis, exc, f"{name} of {job!r}") from exc

    def _index(self, doing: str, *args: Union[str, int]) -> Any:
        """index.lua on the index of pending requests (see the module's docstring)."""
        return self._call(doing, self._scripts["index"], self.client, [self._pending_key], args)

    def _script_many(
        self, name: str, jobs: Sequence[str], args: Sequence[Sequence[Union[str, int]]], doing: str
    ) -> List[Any]:
        """The script ``name`` once per job of ``jobs``, with the ``args`` of the same index, in one
        pipeline (:meth:`Script.many`: one round trip, one per node of a cluster, each call
        atomic on its own); the replies in order. A call the server refused raises, naming its job."""
        script = self._scripts[name]
        calls = [(script.job_keys(self.prefix, job), job_args) for job, job_args in zip(jobs, args)]
        replies: List[Any] = self._call(doing, script.many, self.client, calls)
        for job, reply in zip(jobs, replies):
            if isinstance(reply, Exception):
                raise _store_error(self._redis, reply, f"{name} of {job!r}") from reply
        return replies

    # -- the reads of the contract (arguments checked by Store) --------------------------

    def now_ms(self) -> int:
        seconds, micros = self._call("reading the server's clock", self.client.time)
        return int(seconds) * 1000 + int(micros) // 1000

    def _job_state(self, job: str) -> JobState:
        return read_state(job, self._script("state", job))

    def _job_states(self) -> List[JobState]:
        def queue(pipe: Any, name: str) -> None:
            paused, requests = control_keys(self.prefix, name)
            pipe.hmget(paused, "by", "ms", "note")
            pipe.hgetall(requests)

        now = self.now_ms()  # the states are judged at one clock
        states = []
        for name, (pause, requests) in self._each_member(self._controlled_key, "reading job states", queue):
            state = read_state(name, [now, *pause, *(part for pair in requests.items() for part in pair)])
            if state.paused or state.requests:
                states.append(state)
        return states

    def _pending_requests(self) -> List[ManualRequest]:
        return read_index(self._index("reading the pending requests", "read"))

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        raw = self._call(f"reading {job!r}", self.client.hget, job_keys(self.prefix, job)[0], str(slot_ms))
        return None if raw is None else read_run(job, str(slot_ms), raw)

    def _unfinished(self, job: str) -> List[Run]:
        return self._read_runs(job, "unfinished", 0)

    def _runs(self, job: str, limit: int) -> List[Run]:
        return self._read_runs(job, "runs", limit)

    def _read_runs(self, job: str, which: str, limit: int) -> List[Run]:
        return _runs_of(job, self._script("runs", job, which, limit))

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        """One pipeline of runs.lua calls, one per job: one round trip, one per node of a cluster."""
        doing = f"reading the runs of {len(jobs)} jobs"
        replies = self._script_many("runs", jobs, [("runs", limit)] * len(jobs), doing)
        return {job: _runs_of(job, reply) for job, reply in zip(jobs, replies)}

    def _jobs(self) -> List[str]:
        def queue(pipe: Any, name: str) -> None:
            pipe.exists(job_keys(self.prefix, name)[1])

        return [name for name, (found,) in self._each_member(self._jobs_key, "listing jobs", queue) if found]

    def _each_member(self, key: str, doing: str, queue: Callable[[Any, str], None]) -> List[Tuple[str, List[Any]]]:
        """The names in the set ``key``, sorted, each with the replies of the commands that
        ``queue(pipe, name)`` puts in one pipeline (a cluster's takes no script)."""
        names = sorted(text(m) for m in self._call(doing, self.client.smembers, key))
        if not names:
            return []

        def read() -> List[Any]:
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                queue(pipe, name)
            return list(pipe.execute())

        replies = self._call(doing, read)
        each = len(replies) // len(names)
        return [(name, replies[i * each : (i + 1) * each]) for i, name in enumerate(names)]
