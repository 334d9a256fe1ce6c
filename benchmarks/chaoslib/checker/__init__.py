"""The chaos checker: verifies a run's invariants from the instances' logs and the store's final records.

:func:`check` reads every ``*.jsonl`` file of a log directory (the
instances' lines, see :mod:`chaoslib.worker`, and the harness's
``nemesis.jsonl``) and the runs the store holds at the end, and returns a
:class:`Report`: for each invariant how many cases were checked and the
violations, each a one-line explanation naming job, slot, attempt and runner.
It is pure analysis: no process, no store, no clock. The package's modules:
``report`` (settings, invariants, the report), ``model`` (the logs, indexed),
``bounds``, and the checks by theme: ``safety``, ``outcomes``, ``timing``,
``sink``.

Times come from ``mono_ns`` (CLOCK_MONOTONIC, shared by the processes of one
host); a store's lease is judged conservatively from the calls around it: a
renewal (won claim or accepted heartbeat) sent at ``s`` and answered at ``r``
was processed in ``[s, r]``, so the lease it set ran at least until ``s +
lease``. The bounds (``rtt`` is the p99 of heartbeat round trips of the run,
``margin`` :attr:`Config.margin_ms`, default 250 ms, covers thread scheduling
and ``run_forever``'s signal handling; ``rtt`` is taken from the heartbeats that
no fault or freeze touched, so a fault's delays are never folded into a bound:
an overlap or a late ``lost`` that a network or store fault of the older
runner touched is excused, counted as skipped):

* overlap window: ``heartbeat + rtt + tick + 50 ms``;
* takeover after SIGKILL: ``lease + 2 x heartbeat + rtt + margin``;
* hand-over after SIGTERM: ``2 x heartbeat + rtt + margin``;
* local deadline: last successful renewal sent + ``lease`` + ``margin``.

The invariants (names as in :attr:`Report.invariants`):

``tokens_unique``        every won attempt has its own token.
``attempts_sequential``  the attempts of a slot were won as 1..n, in order, without
                         duplicates; a gap is excused (skipped) only where a SIGKILL
                         could have hit between a won claim and its log line, or a
                         claim of the slot sent before the next attempt's got no
                         answer (an ambiguous write: the server may run it late).
``record_last_token``    the stored record holds the last attempt and its token.
``one_finish``           at most one finish accepted per slot, with the record's
                         token and status.
``fencing``              every heartbeat, finish or release sent with an older
                         token after a newer attempt was won (or after its own
                         release) was refused.
``overlap_window``       the time covered by an older attempt's ticks after the
                         newer attempt's first tick (each tick covers ``tick_ms``) is
                         within the overlap bound, per stretch between SIGCONTs
                         of the older's process (frozen time cannot tick). The ticks
                         of every try of an attempt count, and those of a try working
                         on past its timeout.
``lost_in_time``         an older attempt that still did anything after the newer
                         started logs ``lost`` within the overlap bound of that
                         start or of the SIGCONT that resumed it.
``local_deadline``       without a SIGSTOP, an attempt ticks no more past its local
                         deadline, and a handler still running then logs ``lost``
                         by it (when not fenced by a refusal). A ``lost`` that comes
                         late for a handler that had ended in time is no violation:
                         only the store's record of the end was pending.
``margin_kept``          an attempt that logged ``lost`` (unrenewed: by its local
                         deadline) did so at least ``lease_margin_ms`` less a 50 ms
                         tolerance before the slot's next attempt began, unless its
                         process was SIGSTOPped since its last confirmed renewal, it
                         released the run after ``lost``, or the store's clock was
                         stepped or a replicated store failed over meanwhile
                         (``checker/margin.py``); the report gives the smallest gap.
``end_state``            every slot ends completed (success/failed), skipped as
                         overlap, refused late, skipped as rescheduled (claims answered
                         ``stale``), interrupted by a newer slot, or out of attempts.
                         A run still ``running`` is counted as live
                         at the end when its runner was still at it, or no
                         instance could have taken it over before the logs end.
                         On a replicated store, a slot without a record whose
                         claims were answered ``running`` or ``done`` about a run nobody
                         logged winning ends ``unconfirmed, lost in a failover``
                         when a failover may have discarded that run's write.
``dead_runners_only``    attempt k+1 follows only a runner that was killed, frozen,
                         terminated, cut off by a store/network fault, or whose
                         own lines show a failed or refused call, ``lost`` or a
                         hand-over.
``failed_not_retried``   no attempt is won after a failed finish was accepted.
``max_attempts``         attempts started because runners died (all attempts minus
                         released ones) <= ``max_attempts``.
``skip_no_overlap``      for ``overlap="skip"`` jobs, no claim was won while an
                         earlier slot's lease was surely alive.
``not_late``             no new run (attempt 1) was won by a claim sent more than
                         ``max_late_ms`` (``catch_up_ms`` for catch-up) + 10 s +
                         margin after its slot (wall clock, the host's = SQLite's).
``not_early``            no claim was answered ``early`` (its slot more than 10 s ahead of
                         the store's clock) but while the store's clock was stepped.
``on_time``              each process's first scheduled claim of a slot was sent (true wall
                         clock: a skewed instance's lines are corrected by its skew) from
                         200 ms before to 1 s after the slot, unless its process was
                         frozen, not yet running, or hit by a fault (a frozen SQLite
                         writer included: its claims wait behind the one before), or the
                         store's clock was stepped within a resync interval (61 s) before.
``takeover_delay``       SIGKILL of a runner with a live attempt -> the next
                         attempt's start, within the takeover bound.
``handover_delay``       SIGTERM of a runner whose attempt was released -> the
                         next attempt's start, within the hand-over bound.
``sink_newest``          a refused sink write has a newer attempt's accepted write;
                         with :attr:`Config.sink`, a slot completed with
                         ``success`` holds the final token in the sink.
``paused_no_new_run``    no ``schedule``/``catch-up`` claim sent after a pause's answer and
                         answered before the next resume was sent won a new run, and no
                         stored attempt 1 of that kind started between the pause's time and
                         the resume's on the store's clock (``checker/controls.py``).
``trigger_once``         each request's slot was won at most once, by a manual claim; it ran
                         (or was skipped as an overlap) when an instance was up to claim it
                         within ``poll_ms`` + the hand-over bound; no manual run without a
                         request, unless a trigger of its job got no answer.
``attempts_match``       each record's ``attempts`` match the logs: numbering, the last
                         attempt's outcome vs the status, ``expired`` only when followed or
                         interrupted, runners and reasons as logged, releases and finishes
                         as logged (``checker/attempts.py``).
``timeout_enforced``     for a job with ``timeout_ms``: the signal aborts ``timeout``
                         no sooner than timeout_ms after the claim's answer, no later
                         than timeout_ms + margin after the first try began; a try that
                         works on past it is renewed throughout (a heartbeat in flight
                         or due); the attempt then ends ``failed``, ``timed out after N
                         ms`` (finish, event, record), never released
                         (``checker/tries.py``).
``tries_sequential``     an attempt's tries begin as 1..k, k <= ``retries`` + 1 (a
                         backup at 1), each after the one before raised, after its
                         ``retry`` event and its wait (plus any time its process was
                         frozen or starved), never after an abort or ``lost``.
``retry_outcome``        a run recorded ``success`` ended by a try that returned; one
                         recorded ``failed`` by a last try that raised after all its
                         tries (or was aborted), with that try's error.
``rescheduled_fenced``   no claim from a version of a job's schedule older than an answered
                         change of it won a new run (attempt 1, scheduled or catch-up) that
                         started, on the store's clock, after the change's ``updated_ms``
                         (rule 23; ``checker/schedules.py``).
``stored_once``          each new run of a stored job was claimed from a put whose schedule has
                         its slot (never a deleted job's); each slot of a put that fell due
                         after the instances had polled it, before the job's next change, while
                         an instance was up and could reach the store, has a run.

What these logs cannot show, counted as *not checked* (``skipped``) rather
than passed:

* a store's clock is not logged: a lease is "alive" only where the calls
  around it prove it; a skip check whose window is ambiguous, or that a step
  of the store's clock touched, is not a violation (nor is a late claim won
  while the clock was stepped);
* an attempt whose claim was won without a ``won`` line (SIGKILL between the
  store's answer and the log write; or a claim that timed out or lost its
  connection although the store carried it out) has no token and no lines:
  the checks it belongs to are skipped;
* a delay that exceeds its bound while a store or network fault, a frozen
  SQLite writer or the lack of any available backup could explain it is
  counted as *excused*, not as a violation;
* on SQLite, a *frozen writer* is an instance SIGSTOPped inside a store write
  (a claim, heartbeat, finish or release sent before the freeze and answered
  after it: each is one ``BEGIN IMMEDIATE`` transaction, which holds the
  file's write lock), or one whose lines cannot rule it out (frozen before its
  first write was answered, or logging nothing after the freeze), unless
  someone else held the lock during the freeze (another process's write
  changed the store, or the nemesis's locker or writer had it): then it was
  waiting for the lock, not holding it. Until it resumes no other instance can
  write: it counts as a store fault of every runner wherever a delay is judged
  (``on_time``, the takeover and hand-over delays, a run still ``running`` at
  the end, the round trip of the bounds), never where an outcome is (the
  safety invariants, ``dead_runners_only``, ``overlap_window``,
  ``lost_in_time``: a runner stops by its local deadline whatever the store
  does). The report's ``frozen_writers`` effect counts them;
* whether a ``late`` answer was justified (the store's ``now`` at the claim
  is not known); only won claims are checked;
* the sink's final contents only when :attr:`Config.sink` names the file.

The operator's ``operator.jsonl`` (pause, resume, trigger, reschedule, reset, put, delete,
final-state, final-schedule; see :mod:`chaoslib.controls` and :mod:`chaoslib.schedules`) is read
by ``checker/controls.py``: a call that raised may have been carried out, so only what the
answers prove is judged.

The harness's ``nemesis.jsonl`` lines: ``{"ev": "nemesis", "action": ...,
"runner", "pid", "wall_ns", "mono_ns", ...}``. ``kill``, ``stop``, ``cont``,
``term`` and ``start-instance`` concern one process (``pid``, else the
``runner``'s latest incarnation); a process frozen with no ``cont`` logged
counts as resumed at its first line after the freeze. Every other action is
a store or network fault, of one runner when the line names it, else of all:
``stall`` lasts until an ``unstall`` of the same scope, ``partition`` until
``heal``, ``latency`` until ``unlatency``/``heal`` or a ``latency`` line
whose ``ms`` is 0, ``clock-step`` (the store's clock jumped by ``offset_ms``)
until ``clock-back``; any other action (``reset``, ``store-restart`` stamped at
the crash, and on a replicated store ``failover`` and ``replica-cut``, stamped at
the kill or SIGSTOP and lasting until the topology settled) lasts its
``duration_ms``, if given. A fault's effects are taken to last ``lease + 2 x
heartbeat`` after it ends. The report counts failovers among the faults, and
after each ``kill -9`` of a primary (``failover``, ``how: kill``) measures the
delays until the promotion, the next handler start, the next takeover and the
settled topology (:attr:`Report.failover_ms`).

The harness's ``harness.jsonl``: one ``{"ev": "final-stop", "wall_ns", "mono_ns"}`` line
written just before it sends every instance its final SIGTERM. A process still running then
was stopped by it, as by a ``term`` (an attempt it won after it, and released at once as the
process exited, may lack its release line); the final stop is no fault and no hand-over to time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from .attempts import check_attempt_records
from .bounds import bounds_of
from .controls import check_paused, check_triggers, read_controls
from .margin import MARGIN_TOLERANCE_MS, check_margin
from .model import Model, build_model
from .outcomes import check_max_attempts, check_successors, end_state
from .report import (
    DEFAULT_JOBS,
    END_STATES,
    INVARIANTS,
    Config,
    Delays,
    InvariantResult,
    JobConfig,
    Report,
    read_final_runs,
)
from .schedules import Change, changes_of, check_fenced, check_stored_once, longest_gaps
from .schedules import effects as schedule_effects
from .safety import (
    check_attempts,
    check_fencing,
    check_local_deadline,
    check_one_finish,
    check_overlap,
    check_record,
    check_tokens,
)
from .sink import check_sink
from .timing import check_delays, check_not_late, check_skip, check_timing, failover_delays
from .tries import check_outcome, check_timeout, check_tries, tries_effects

__all__ = [
    "Config",
    "DEFAULT_JOBS",
    "Delays",
    "INVARIANTS",
    "InvariantResult",
    "JobConfig",
    "Report",
    "check",
    "read_final_runs",
]


def _effects(model: Model, changes: Dict[str, List[Change]]) -> Dict[str, int]:
    calls = [c for att in model.attempts.values() for c in att.calls]
    actions = [n.get("action") for n in model.nemesis]
    return {
        "takeovers": sum(1 for c in model.claims if c.get("outcome") == "won" and c.get("reason") == "takeover"),
        "refused_heartbeats": sum(1 for c in calls if c["ev"] == "heartbeat" and c.get("ok") is False),
        "refused_late_claims": sum(1 for c in model.claims if c.get("outcome") == "late"),
        "failed_heartbeats": sum(1 for c in calls if c["ev"] == "heartbeat" and c.get("ok") is None),
        "refused_finishes": sum(1 for c in calls if c["ev"] == "finish" and c.get("ok") is False),
        "lost_events": len(model.lost_events),
        "handovers": len(model.handover_events),
        "overlaps_skipped": sum(1 for c in model.claims if c.get("outcome") == "overlap"),
        "planned_failures": sum(
            1 for a in model.attempts.values() if a.end is not None and a.end.get("outcome") == "raised"
        ),
        "kills": actions.count("kill"),
        "stops": actions.count("stop"),
        "terms": actions.count("term"),
        "store_restarts": actions.count("store-restart"),
        "failovers": actions.count("failover"),
        "replica_cuts": actions.count("replica-cut"),
        "stalls": actions.count("stall"),
        "frozen_writers": len(model.frozen_writers),
        "paused_claims": sum(1 for c in model.claims if c.get("outcome") == "paused"),
        "manual_runs": sum(1 for c in model.claims if c.get("outcome") == "won" and c.get("reason") == "manual"),
        **tries_effects(model),
        **schedule_effects(model, changes),
    }


def check(log_dir: Path, final_runs: Dict[str, List[dict]], config: Config) -> Report:
    """Verify the invariants of one chaos run; see the module docstring for each of them."""
    model = build_model(Path(log_dir), final_runs, config)
    controls = read_controls(Path(log_dir))
    changes = changes_of(controls)
    model.gaps = longest_gaps(model, changes)
    model.deletes = {job: [c.sent_ns for c in chs if c.action == "delete"] for job, chs in changes.items()}
    b = bounds_of(model, config)
    inv = {name: InvariantResult(name, text) for name, text in INVARIANTS.items()}
    takeover, handover = Delays(b.takeover_ms), Delays(b.handover_ms)
    end_states = {state: 0 for state in END_STATES}
    gaps: List[float] = []
    check_tokens(model, inv["tokens_unique"])
    for slot in sorted(model.slots.values(), key=lambda s: (s.job, s.slot_ms)):
        check_attempts(model, slot, inv["attempts_sequential"])
        check_record(model, slot, inv["record_last_token"])
        check_one_finish(slot, inv["one_finish"])
        check_fencing(slot, inv["fencing"])
        check_overlap(model, slot, b, inv["overlap_window"], inv["lost_in_time"])
        check_margin(model, slot, config.margin_of_lease_ms, inv["margin_kept"], gaps)
        check_successors(model, slot, inv["dead_runners_only"], inv["failed_not_retried"])
        check_max_attempts(slot, config.max_attempts, inv["max_attempts"])
        check_attempt_records(model, slot, inv["attempts_match"])
        check_outcome(model, slot, inv["retry_outcome"])
        state, why = end_state(model, slot, b)
        inv["end_state"].checked += 1
        if state is not None:
            end_states[state] += 1
        else:
            inv["end_state"].fail(f"{slot.label()}: {why}")
    for att in model.attempts.values():
        check_local_deadline(model, att, b, inv["local_deadline"])
        check_timeout(model, att, b, inv["timeout_enforced"])
        check_tries(model, att, b, inv["tries_sequential"])
    for job, jc in config.jobs.items():
        if jc.overlap == "skip":
            check_skip(model, job, b, inv["skip_no_overlap"])
    check_not_late(model, config, inv["not_late"])
    check_timing(model, config, inv["not_early"], inv["on_time"])
    check_delays(model, "kill", takeover, inv["takeover_delay"])
    check_delays(model, "term", handover, inv["handover_delay"])
    check_sink(model, config, inv["sink_newest"])
    check_paused(model, controls, inv["paused_no_new_run"])
    check_triggers(model, controls, b, inv["trigger_once"])
    check_fenced(model, changes, inv["rescheduled_fenced"])
    due = check_stored_once(model, changes, b, inv["stored_once"], controls.stopped_ns)
    return Report(
        invariants=inv,
        effects={**_effects(model, changes), "stored_due_slots": due},
        end_states=end_states,
        takeover=takeover,
        handover=handover,
        rtt_p99_ms=b.rtt_p99_ms,
        overlap_bound_ms=b.overlap_ms,
        margin_ms=config.margin_ms,
        notes=_notes(model, config),
        failover_ms=failover_delays(model),
        margin_gaps_ms=gaps,
        lease_margin_ms=config.margin_of_lease_ms,
        margin_tolerance_ms=MARGIN_TOLERANCE_MS,
    )


def _notes(model: Model, config: Config) -> List[str]:
    notes = []
    if model.malformed:
        notes.append(f"{model.malformed} malformed log line(s) ignored")
    if config.sink is None:
        notes.append("sink contents not checked (Config.sink not given)")
    if not model.procs:
        notes.append("no instance lines found")
    return notes
