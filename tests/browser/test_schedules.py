"""Schedules as data in a real Chromium, while three instances run the app of ``conftest.py``.

A person changes a job's schedule in its page and sees the next slot move, and the instances
run the new schedule; resets it, and no slot of the override starts after the reset. A person
stores a job in the jobs page's form (task ``echo`` of the app, with kwargs), sees it listed,
and the instances run it with those kwargs; deletes it, and no new run of it starts. Each
outcome is checked in the page and in the store the instances share; every wait is a deadline on
a condition, never a fixed sleep. This module has a site of its own (the fixtures are per module).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Optional

import pytest

from tests.helpers import wait_for

from .conftest import Site
from .test_dashboard import flashed, job_path, row, until

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = [pytest.mark.processes, pytest.mark.timeout(60)]

#: What a job's page says of its schedule, read in one script call (plain values).
ABOUT_JS = """
const about = document.querySelector('p.about');
if (!about) return null;
const next = about.querySelector('span.next time');
const schedule = about.querySelector('span.schedule');
return {source: about.dataset.source, version: Number(about.dataset.version), tz: about.dataset.tz,
        schedule: schedule ? schedule.textContent.trim() : null, next: next ? Number(next.dataset.ms) : null};
"""


def about(browser: "WebDriver") -> Optional[Dict[str, Any]]:
    """What the job's page shows of its schedule (None before the page is there)."""
    return browser.execute_script(ABOUT_JS)


def submit(browser: "WebDriver", form_css: str, fields: Dict[str, str]) -> None:
    """Open the ``<details>`` around the form ``form_css`` (when closed), type ``fields`` into it
    (each replacing what the field held) and submit it. A live refresh may replace the page
    between two steps until the details are open (dashboard.js then holds off): then again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def done(b: "WebDriver") -> bool:
        try:
            form = b.find_element(By.CSS_SELECTOR, form_css)
            details = form.find_elements(By.XPATH, "ancestor::details[1]")
            if details and details[0].get_attribute("open") is None:
                details[0].find_element(By.TAG_NAME, "summary").click()
            for name, value in fields.items():
                field = form.find_element(By.NAME, name)
                field.clear()
                field.send_keys(value)
            form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            return True
        except StaleElementReferenceException:
            return False

    until(browser, done, f"the form {form_css}")


def ran_twice_after(site: Site, job: str, ms: int) -> bool:
    """Whether two runs of ``job`` started after ``ms`` (store time): the instances went on."""
    return len([r for r in site.runs(job, 10) if r.started_ms > ms]) >= 2


def test_edit_a_schedule_in_the_page_and_the_next_slot_moves(site: Site, browser: "WebDriver") -> None:
    """The yearly job gets a 2 s schedule in its page: the page shows the override and a next slot
    seconds away, and the instances run it on that schedule; the reset button brings New Year back,
    and no slot of the override starts after the reset."""
    job = "exports/nightly"
    browser.get(site.base + job_path(job))
    before = until(browser, lambda b: (lambda a: a if a and a["next"] else None)(about(b)), "the next slot")
    assert before["source"] == "code" and before["version"] == 0
    assert site.store.now_ms() + 86_400_000 < before["next"]  # New Year: more than a day away here

    submit(browser, "form.action.reschedule", {"schedule": "2", "tz": ""})
    after = until(browser, lambda b: flashed(b, "Rescheduled job") and (about(b) or {}).get("source") == "override"
                  and about(b), "the override in the page")  # fmt: skip
    record = site.store.stored_schedule(job)
    assert record is not None and (record.source, record.schedule, record.version) == ("override", "2", 1)
    assert after["version"] == 1 and after["schedule"] == "every 2.0 s"
    assert after["next"] % 2000 == 0 and record.updated_ms < after["next"] <= record.updated_ms + 10_000
    run = wait_for(lambda: next((r for r in site.runs(job, 5) if r.reason == "schedule" and r.slot_ms >= after["next"]
                                 and r.status == "success"), None),
                   timeout=10, message=f"no instance ran {job!r} on its new schedule")  # fmt: skip
    assert run.slot_ms % 2000 == 0

    from selenium.webdriver.common.by import By

    until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "form.action.reset"), "the reset form")
    submit(browser, "form.action.reset", {})
    back = until(browser, lambda b: flashed(b, "Reset job") and (about(b) or {}).get("source") == "code"
                 and about(b), "the code's schedule in the page")  # fmt: skip
    reset = site.store.stored_schedule(job)
    assert reset is not None and (reset.source, reset.version) == ("code", 2) and back["version"] == 2
    assert back["next"] == before["next"]
    wait_for(lambda: ran_twice_after(site, "tick", reset.updated_ms), timeout=8, message="'tick' stopped running")
    late = [r.slot_ms for r in site.runs(job, 20) if r.reason == "schedule" and r.started_ms > reset.updated_ms]
    assert late == [], f"slots of the override started after the reset: {late}"


def test_store_a_job_in_the_page_and_see_it_run(site: Site, browser: "WebDriver") -> None:
    """The jobs page's form stores a job of task ``echo`` every second with kwargs: its row shows
    it as stored, the instances run it with those kwargs, its marks appear; deleting it in its page
    stops it."""
    name, message = "echo team 7", 'hello <b>7</b> & "co"'
    browser.get(site.base + "/")
    submit(browser, "form.action.put_stored", {"name": name, "task": "echo", "schedule": "1", "tz": "",
                                               "kwargs": json.dumps({"message": message}), "options": ""})  # fmt: skip
    until(browser, lambda b: flashed(b, f"Stored job {name!r}") and row(b, name), f"the row of {name!r}")
    record = site.store.stored_schedule(name)
    assert record is not None and record.as_job().kwargs == {"message": message} and record.task == "echo"

    run = wait_for(lambda: next((r for r in site.runs(name, 5) if r.status == "success"), None), timeout=10,
                   message=f"no instance ran the stored job {name!r}")  # fmt: skip
    assert run.reason == "schedule" and run.slot_ms % 1000 == 0 and run.slot_ms >= record.updated_ms - 1000
    logged = f"echo {message!r} slot {run.slot_ms}"
    wait_for(lambda: any(logged in p.stderr() for p in site.instances.values()), timeout=5,
             message=f"no instance logged {logged!r}")  # fmt: skip
    shown = until(browser, lambda b: (lambda r: r if r and any(m["slot"] == run.slot_ms for m in r["marks"]) else None)(
        row(b, name)), f"the mark of {name!r} slot {run.slot_ms}")  # fmt: skip
    assert all("mark-success" in m["cls"].split() or "mark-running" in m["cls"].split() for m in shown["marks"])

    from selenium.webdriver.common.by import By

    browser.get(site.base + job_path(name))
    assert until(browser, about, "the job's page")["source"] == "stored"
    assert browser.find_element(By.CSS_SELECTOR, "p.stored code.kwargs").text == json.dumps({"message": message})
    submit(browser, "form.action.delete_stored", {})
    until(browser, lambda b: flashed(b, f"Deleted stored job {name!r}"), "the deletion's flash")
    deleted = site.store.stored_schedule(name)
    assert deleted is not None and (deleted.source, deleted.version) == ("code", 2)
    wait_for(lambda: ran_twice_after(site, "tick", deleted.updated_ms), timeout=8, message="'tick' stopped running")
    late = [r.slot_ms for r in site.runs(name, 20) if r.started_ms > deleted.updated_ms]
    assert late == [], f"runs of the deleted job started after the deletion: {late}"
