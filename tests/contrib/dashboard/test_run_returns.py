"""The run page of a run whose attempt's handler returned after the run was lost (rule 26): the note
under the title, the timeline's mark where the handler returned, and the attempts table's column.

Runs are made through the store's operations (memory and SQLite, the ``store`` fixture); the page is
read as a browser reads it (parsed).
"""

from __future__ import annotations

from leasecron import Store
from leasecron.contrib.dashboard.rows import bars
from tests.contrib.dashboard.conftest import PREFIX, client, get_page, history


def test_the_run_page_says_an_interrupted_runs_handler_returned(store: Store) -> None:
    """An interrupted run whose attempt 1 (web-1) returned success after its lease ran out: a note
    "Interrupted, but attempt 1's handler returned success at <time>", a mark on attempt 1's
    timeline bar, and "success at <time>" in the attempts table; the status stays interrupted."""
    slots = history(store, "etl")
    slot = slots["interrupted"]
    before = store.get_run("etl", slot)
    assert before is not None
    returned_ms = before.attempts[0].started_ms + 20
    assert store.record_return("etl", slot, 1, "web-1", returned_ms, "success")
    page = get_page(client(store), f"{PREFIX}/jobs/etl/runs/{slot}")
    assert page.find("h1").find("span", "status").text == "interrupted"
    note = page.find("p", "returned-note", data_number="1")
    assert note.text.startswith("Interrupted, but attempt 1's handler returned success at ")
    assert note.find("time").attrs["data-ms"] == str(returned_ms)
    assert "recorded after the run was lost" in note.text

    (item,) = page.find("ol", "run-timeline").find_all("li", "attempt")
    assert item.classes[1] == "attempt-expired" and item.find("span", "returned").text == "handler returned success"
    mark = item.find("rect", "return-mark")
    after = store.get_run("etl", slot)
    assert after is not None and after.status == "interrupted"
    [(_, bar)] = bars(after, store.now_ms())
    assert bar.returned is not None and mark.attrs["x"] == str(bar.returned)
    (row,) = page.find("table", "attempts").find_all("tr", "attempt")
    cell = row.find("td", "returned")
    assert cell.text.startswith("success at ") and cell.find("time").attrs["data-ms"] == str(returned_ms)


def test_a_run_without_a_return_has_no_note_mark_or_cell(store: Store) -> None:
    """The chain run (attempt 1 expired, attempt 2 succeeded) has no return: no note, no mark, and the
    attempts table has no "Handler returned" column."""
    slots = history(store, "etl")
    page = get_page(client(store), f"{PREFIX}/jobs/etl/runs/{slots['chain']}")
    assert page.find_all("p", "returned-note") == []
    timeline = page.find("ol", "run-timeline")
    assert len(timeline.find_all("li", "attempt")) == 2 and timeline.find_all("rect", "return-mark") == []
    table = page.find("table", "attempts")
    assert table.find_all("td", "returned") == [] and "Handler returned" not in table.find("thead").text


def test_a_return_later_than_every_end_widens_the_timeline(store: Store) -> None:
    """A handler that returned after its attempt's lease ended lies on the run's span: the span runs
    to the return, and the mark is within 0-100 %."""
    slots = history(store, "etl")
    slot = slots["interrupted"]
    run = store.get_run("etl", slot)
    assert run is not None and run.attempts[0].ended_ms is not None
    late = run.attempts[0].ended_ms + 10_000
    assert store.record_return("etl", slot, 1, "web-1", late, "failed", "boom")
    marked = store.get_run("etl", slot)
    assert marked is not None
    [(_, bar)] = bars(marked, store.now_ms())
    assert bar.returned is not None and 99.0 <= bar.returned <= 99.5 and bar.width < 10
