"""The sink: only the newest attempt's result of a slot is kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .model import Model
from .report import Config, InvariantResult, SKey


def check_sink(model: Model, config: Config, inv: InvariantResult) -> None:
    accepted: Dict[SKey, List[int]] = {}
    for line in model.sink_lines:
        if line.get("accepted") is True:
            accepted.setdefault((line["job"], line["slot_ms"]), []).append(line["attempt"])
    for line in model.sink_lines:
        if line.get("accepted") is not False:
            continue
        inv.checked += 1
        newer = [n for n in accepted.get((line["job"], line["slot_ms"]), []) if n > line["attempt"]]
        first_claim = min((c["mono_ns"] for c in model.slot(line["job"], line["slot_ms"]).claims), default=0)
        if not newer and model.nemesis_in({"kill"}, first_claim, line["mono_ns"]):
            inv.skipped += 1
        elif not newer:
            inv.fail(
                f"{line['job']}@{line['slot_ms']} #{line['attempt']} ({line.get('runner')}):"
                " sink refused the write, no newer attempt wrote"
            )
    rows = _sink_rows(config.sink)
    if rows is None:
        return
    failed_writes = {
        (line["job"], line["slot_ms"], line["attempt"]) for line in model.sink_lines if line.get("accepted") is None
    }
    for slot in model.slots.values():
        rec = slot.record
        if rec is None or rec.get("status") != "success":
            continue
        if (slot.job, slot.slot_ms, rec.get("attempt")) in failed_writes:
            inv.skipped += 1  # the final attempt's write failed (logged with its error): nothing to hold
            continue
        inv.checked += 1
        row = rows.get((slot.job, slot.slot_ms))
        if row is None or row[1] != rec.get("token"):
            held = "nothing" if row is None else f"attempt {row[0]} token {row[1]}"
            inv.fail(
                f"{slot.label()}: completed by #{rec.get('attempt')} token {rec.get('token')}, the sink holds {held}"
            )


def _sink_rows(path: Optional[Path]) -> Optional[Dict[SKey, Tuple[int, str]]]:
    if path is None or not Path(path).exists():
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            (job, slot): (attempt, token)
            for job, slot, attempt, token in conn.execute("SELECT job, slot_ms, attempt, token FROM results")
        }
    finally:
        conn.close()
