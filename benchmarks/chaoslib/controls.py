"""The operator of a chaos run: a seeded thread that pauses, resumes, triggers and reschedules jobs at random.

While the nemesis hurts the cluster, the :class:`Operator` uses the cluster-wide controls the
way a person at ``leasecron pause|resume|trigger`` would, through the store's public API
(``open_store(url)``, ``store.pause``, ``store.resume``, ``store.request_run``). Every
``gap_s`` (2–6 s, drawn from ``random.Random(f"{seed}:operator")``) it either triggers a job (3
times in 5; paused or not) or pauses one that is not paused; a pause is undone ``pause_s`` later
(3–8 s: every job has a slot inside it). By ``quiet_at`` every pause is undone and nothing new
is done, so the run settles as it would without the operator.

Between those it changes schedules (:class:`~chaoslib.schedules.ScheduleChanger`, a seeded
stream of its own): it reschedules the code's jobs and resets them later, and puts, replaces
and deletes stored jobs, with :meth:`~leasecron.Store.set_schedule` as ``leasecron
reschedule|put|delete URL`` do; by ``quiet_at`` every override is reset, and at ``settled_at``
(in the quiet end, once the faults' effects are over) one stored job is put again.

It talks to the store directly, not through an instance's fault proxy: its calls fail only
while the store itself is down, and a call that failed can never land later (a stalled
proxy could deliver a pause after the resume that followed it). A call that raised may have
been carried out all the same; a pause that raised is undone like one that worked.

Each call is one line of ``operator.jsonl`` (``{"ev": "operator", "action", "job", "wall_ns",
"mono_ns", "t0_mono_ns", "t1_mono_ns", ...}``, ``mono_ns`` the answer's time), with the store's
answer, or ``error`` when it raised:

===========  =====================================================================
pause        ``paused_ms`` (the store's clock when it was stored), ``note``
resume       ``now_before_ms``: the store's clock read just before the call (None if
             that read failed), so the resume was stored at or after it
trigger      ``slot_ms``, ``expires_ms``, ``state``, ``max_late_ms`` of the request
reschedule   ``schedule``, ``tz``, and the store's answer: ``version``, ``updated_ms`` (the
             change's time on the store's clock), ``source``, ``updated_by``
reset        the store's answer (``source`` ``code``)
put          ``schedule``, ``tz``, ``task``, ``kwargs``, ``options``, and the store's answer
delete       the store's answer (``source`` ``code``)
final-state  after the run, once per job: ``state`` (``JobState.to_dict()``: the pause
             and the requests the store still keeps, each with its final state)
stopped      the operator's last action is done (``job`` empty); the harness stops the
             instances after it, so they were all still at work then
final-       after the run, once per code job and stored name: ``record``, the store's
schedule     ``StoredSchedule.to_dict()`` (None: nothing was ever stored under it)
===========  =====================================================================
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from leasecron import Store, open_store

from .schedules import ScheduleChanger

__all__ = ["Operator"]

log = logging.getLogger("chaoslib.operator")

#: Who the operator's actions are stored as.
ACTOR = "chaos-operator"
#: Of the actions on a job that is not paused, the share that are triggers (the rest: pauses).
TRIGGER_SHARE = 0.6


class Operator(threading.Thread):
    """Pauses, resumes, triggers and reschedules ``jobs`` (name -> ``JobConfig``) and puts and
    deletes stored jobs on the store at ``url``, until :meth:`stop`."""

    def __init__(
        self,
        url: str,
        jobs: Mapping[str, Any],
        seed: int,
        log_path: Path,
        quiet_at: float,
        max_late_ms: int = 30_000,
        gap_s: Tuple[float, float] = (2.0, 6.0),
        pause_s: Tuple[float, float] = (3.0, 8.0),
        settled_at: Optional[float] = None,
    ) -> None:
        super().__init__(name="chaos-operator", daemon=True)
        self.url = url
        self.jobs = sorted(jobs)
        self.quiet_at = quiet_at
        self.settled_at = settled_at
        self.max_late_ms = max_late_ms
        self.gap_s = gap_s
        self.pause_s = pause_s
        self.log_path = Path(log_path)
        self.rng = random.Random(f"{seed}:operator")
        self.schedules = ScheduleChanger(jobs, seed, ACTOR)
        #: Actions done, by kind (``pause``, ``resume``, ``trigger``, ``reschedule``, ``reset``, ``put``,
        #: ``delete``, and ``<kind>:error``).
        self.counts: Dict[str, int] = {}
        #: The jobs paused (or maybe paused: the pause raised), with when to resume them (monotonic).
        self.paused: Dict[str, float] = {}
        self.error: Optional[BaseException] = None
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._store: Optional[Store] = None

    # -- the thread ----------------------------------------------------------------------------

    def stop(self, timeout: float = 30.0) -> None:
        """Undo every pause and override still in effect and end the thread."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        try:
            next_at = time.monotonic() + self.rng.uniform(*self.gap_s)
            while not self._halt.wait(0.05):
                now = time.monotonic()
                for job, due in sorted(self.paused.items()):
                    if due <= now or now >= self.quiet_at:
                        self._resume(job)
                if now >= next_at and now < self.quiet_at:
                    self._act(now)
                    next_at = now + self.rng.uniform(*self.gap_s)
                if now >= self.quiet_at:
                    self.schedules.reset_all(self._call)
                    if self.settled_at is not None and now >= self.settled_at:
                        self.settled_at = None
                        self.schedules.last_put(self._call)
                else:
                    self.schedules.step(now, self.quiet_at, self._call, self._halt.wait)
            for job in sorted(self.paused):
                self._resume(job)
            self.schedules.reset_all(self._call)
            now_ns = time.monotonic_ns()
            self._write("stopped", "", now_ns, now_ns, {})  # the instances are stopped only after this
        except BaseException as exc:  # noqa: BLE001 - the harness reports it
            log.exception("the operator failed")
            self.error = exc
        finally:
            self._close()

    def _act(self, now: float) -> None:
        free = [job for job in self.jobs if job not in self.paused]
        if self.rng.random() < TRIGGER_SHARE or not free:
            job = self.rng.choice(self.jobs)  # a paused job's request runs all the same
            late = self.max_late_ms
            self._call("trigger", job, lambda s: _request_fields(s.request_run(job, by=ACTOR, max_late_ms=late), late))
            return
        job = self.rng.choice(free)
        note = f"chaos pause {self.counts.get('pause', 0) + 1}"
        resume_at = min(now + self.rng.uniform(*self.pause_s), self.quiet_at)
        self.paused[job] = resume_at  # also when the call raises: it may have been stored
        self._call("pause", job, lambda s: {"paused_ms": s.pause(job, by=ACTOR, note=note).paused_ms, "note": note})

    def _resume(self, job: str) -> None:
        def resume(store: Store) -> Dict[str, Any]:
            try:
                before: Optional[int] = store.now_ms()
            except Exception:  # noqa: BLE001 - then only the monotonic times bound the resume
                before = None
            store.resume(job, by=ACTOR)
            return {"now_before_ms": before}

        self._call("resume", job, resume)
        self.paused.pop(job, None)

    # -- the store and the log -----------------------------------------------------------------

    def _call(self, action: str, job: str, call: Callable[[Store], Dict[str, Any]]) -> None:
        """Do one action and log it with the store's answer (or the error)."""
        t0 = time.monotonic_ns()
        try:
            fields = call(self._open())
        except Exception as exc:  # noqa: BLE001 - logged: the checker treats it as maybe done
            fields = {"error": f"{type(exc).__name__}: {exc}"}
            self._close()  # a fresh connection for the next call
            action_key = f"{action}:error"
        else:
            action_key = action
        self.counts[action_key] = self.counts.get(action_key, 0) + 1
        self._write(action, job, t0, time.monotonic_ns(), fields)

    def _open(self) -> Store:
        if self._store is None:
            self._store = open_store(self.url)
        return self._store

    def _close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def _write(self, action: str, job: str, t0: int, t1: int, fields: Dict[str, Any]) -> None:
        line = {"ev": "operator", "action": action, "job": job, "wall_ns": time.time_ns(), "mono_ns": t1,
                "t0_mono_ns": t0, "t1_mono_ns": t1, **fields}  # fmt: skip
        with self._lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def record_final(self, url: Optional[str] = None) -> List[Dict[str, Any]]:
        """Log a ``final-state`` line per job and a ``final-schedule`` line per name (read from the
        store at ``url``, default the operator's) and return the states; call it once the
        instances stopped."""
        store = open_store(url or self.url)
        try:
            states = [store.job_state(job).to_dict() for job in self.jobs]
            records = self.schedules.final_records(store)
        finally:
            store.close()
        now = time.monotonic_ns()
        for state in states:
            self._write("final-state", str(state["job"]), now, now, {"state": state})
        for name, record in records:
            self._write("final-schedule", name, now, now, {"record": record})
        return states


def _request_fields(request: Any, max_late_ms: int) -> Dict[str, Any]:
    return {"slot_ms": request.slot_ms, "expires_ms": request.expires_ms, "state": str(request.state),
            "max_late_ms": max_late_ms}  # fmt: skip
