"""The HTML pages and their forms: every job, one job's runs, one run; pause, resume, trigger.

Each page is rendered whole on the server from the data of :mod:`.rows`, in
UTC, and reads fine without JavaScript; ``dashboard.js`` only refreshes
``main#content`` every ``refresh_ms``, shows times in the viewer's zone and
counts leases down. Every route has two forms (see :mod:`.links`): the job
in the path (``/jobs/<job>``) and in the query (``/job?job=``).

A form's POST (CSRF-checked, :mod:`.security`) acts through :mod:`.actions`
and answers 303 to the page it came from (its ``next`` field, a path of
this dashboard only), where a flash message says what was done
(:func:`form_done`). The forms that change schedules are in
:mod:`.schedule_routes`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, List, Optional, Tuple

from flask import Blueprint, Response, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from ...formatting import format_duration, lease_left, short_error, slot_text, utc_text
from ...runs import Run
from .actions import ACTIONS, act, check_writable
from .links import JOB, job_of, job_url
from .rows import (
    DEFAULT_PER_PAGE,
    DEFAULT_RUNS,
    JobsPage,
    MAX_RUNS,
    announced_text,
    bars,
    mark_status,
    paging,
    number_arg,
    read_job,
    read_jobs_page,
    status_arg,
)
from .security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    FLASH_COOKIE,
    csrf_ok,
    csrf_token,
    flash_value,
    read_flash,
    safe_next,
    set_cookie,
)
from .settings import DashboardError, Settings

__all__ = ["add_pages", "check_form", "error_page", "form_done", "root"]

#: The templates' folder inside the blueprint's ``templates`` (so an app's own templates never clash).
TEMPLATES = "leasecron_dashboard"


def root() -> str:
    """The path of the dashboard's jobs page (``/cron/``): the root of its cookies and redirects."""
    return url_for(".jobs")


def here() -> str:
    """This page's URL (path and query), for a form's ``next``: built again from the route, as
    the request's path is already percent-decoded (``a%2Fb`` read as ``a/b``)."""
    path = url_for(request.endpoint or ".jobs", **(request.view_args or {}))
    query = request.query_string.decode("latin-1")
    return f"{path}?{query}" if query else path


def run_links(job: str) -> Callable[[int], str]:
    """``slot_ms`` → the URL of ``job``'s run page at that slot: one :func:`job_url` for all the
    runs of a job (a page of 50 jobs links 1,500 runs)."""
    path, mark, query = job_url(".run", job, slot_ms=0).partition("?")
    if not path.endswith("/runs/0"):  # pragma: no cover - the run routes end with the slot
        return lambda slot_ms: job_url(".run", job, slot_ms=slot_ms)
    head = path[: -len("0")]
    return lambda slot_ms: f"{head}{slot_ms}{mark}{query}"


def run_fields(run: Run) -> List[Tuple[str, Any]]:
    """Every field of a run but its attempts (the run page's table shows those), in order."""
    return [(f.name, getattr(run, f.name)) for f in dataclasses.fields(run) if f.name != "attempts"]


def as_json(value: object) -> str:
    """A stored job's kwargs or options as JSON text (the template escapes it)."""
    return json.dumps(value, ensure_ascii=False)


#: What every template may call: ``iso`` a time as ``2026-12-02T10:00:00Z`` (for ``<time>``),
#: ``utc`` as ``2026-12-02 10:00:00`` (each with ``.123`` when it has milliseconds).
HELPERS: Dict[str, Any] = {
    "iso": slot_text,
    "utc": utc_text,
    "duration": format_duration,
    "lease_left": lease_left,
    "short_error": short_error,
    "job_url": job_url,
    "run_links": run_links,
    "mark_status": mark_status,
    "bars": bars,
    "run_fields": run_fields,
    "as_json": as_json,
    "announced": announced_text,
}


def page(settings: Settings, template: str, status: int = 200, **context: Any) -> Response:
    """Render a page with the context every page has; set a new CSRF cookie (unless the app checks
    CSRF itself: ``form_token``), clear a shown flash."""
    if settings.form_token is not None:
        (csrf_field, token), new = settings.form_token(request), False
    else:
        (token, new), csrf_field = csrf_token(request), CSRF_FIELD
    flash, flash_error = read_flash(request)
    html = render_template(
        f"{TEMPLATES}/{template}",
        settings=settings,
        read_only=settings.read_only,
        refresh_ms=settings.refresh_ms,
        store_label=repr(settings.store),
        has_cron=settings.cron is not None,
        tasks=sorted(settings.cron.tasks) if settings.cron is not None else [],
        csrf=token,
        csrf_field=csrf_field,
        here=here(),
        q=request.args.get("q", ""),
        flash=flash,
        flash_error=flash_error,
        **HELPERS,
        **context,
    )
    response = Response(html, status=status, mimetype="text/html")
    if new:
        set_cookie(response, request, CSRF_COOKIE, token, root())
    if flash is not None:
        set_cookie(response, request, FLASH_COOKIE, "", root())
    return response


def error_page(settings: Settings, status: int, message: str) -> Response:
    """A refusal or failure as a page: its status and the message."""
    return page(settings, "error.html", status=status, status_code=status, message=message)


def add_pages(bp: Blueprint, settings: Settings) -> None:
    """Add the pages and the forms' endpoints to ``bp``: ``jobs``, ``job``, ``run``, and one
    endpoint per action."""

    def jobs() -> Response:
        number, per_page = paging(request.args)
        jobs_page = read_jobs_page(settings.store, settings.cron, number, per_page, request.args.get("q", ""))
        return page(settings, "jobs.html", page=jobs_page, now_ms=jobs_page.now_ms,
                    page_links=_page_links(jobs_page.page, jobs_page.pages), page_url=_page_url(jobs_page))

    def job(job: Optional[str] = None) -> Response:
        name = job_of(job)
        status = status_arg(request.args)
        limit = number_arg(request.args, "limit", DEFAULT_RUNS, MAX_RUNS)
        now_ms, view = read_job(settings.store, settings.cron, name, status, limit)
        return page(settings, "job.html", view=view, now_ms=now_ms, status_filter=status, limit=limit)

    def run(slot_ms: int, job: Optional[str] = None) -> Response:
        name = job_of(job)
        store = settings.store
        now_ms = store.now_ms()
        found = store.get_run(name, slot_ms)
        if found is None:
            raise DashboardError(404, f"job {name!r} has no stored run at slot {slot_ms} ({utc_text(slot_ms)} UTC)")
        return page(settings, "run.html", run=found, now_ms=now_ms)

    bp.add_url_rule("/", "jobs", jobs)
    bp.add_url_rule(f"/jobs/{JOB}", "job", job)
    bp.add_url_rule("/job", "job", job)
    bp.add_url_rule(f"/jobs/{JOB}/runs/<int:slot_ms>", "run", run)
    bp.add_url_rule("/job/runs/<int:slot_ms>", "run", run)
    for action in ACTIONS:
        view = _action_view(settings, action)
        bp.add_url_rule(f"/jobs/{JOB}/{action}", action, view, methods=["POST"])
        bp.add_url_rule(f"/job/{action}", action, view, methods=["POST"])


def check_form(settings: Settings) -> None:
    """Refuse a form's POST on a read-only dashboard (403, before the token: a read-only dashboard
    refuses every POST alike), or without the right CSRF token (400; not checked here when the
    app checks CSRF itself: ``form_token``)."""
    check_writable(settings)
    if settings.form_token is None and not csrf_ok(request):
        raise DashboardError(400, "bad or missing CSRF token: reload the page and try again")


def form_done(message: str, error: bool = False) -> BaseResponse:
    """The answer to a form: 303 to the page it came from (its ``next`` field, within the
    dashboard), which flashes ``message`` (as an ``error``: nothing was done)."""
    response = redirect(safe_next(request.form.get("next"), root()), code=303)
    set_cookie(response, request, FLASH_COOKIE, flash_value(message, error), root())
    return response


def _action_view(settings: Settings, action: str) -> Any:
    def view(job: Optional[str] = None) -> BaseResponse:
        check_form(settings)
        name = job_of(job)
        message, _ = act(settings, action, name, settings.who(request), request.form.get("note"))
        return form_done(message)

    view.__name__ = f"{action}_form"
    return view


def _page_url(jobs_page: JobsPage) -> Callable[[int], str]:
    """The URL of another page of the same list (same ``q`` and ``per_page``)."""

    def page_url(number: int) -> str:
        args: Dict[str, Any] = {"page": number}
        if jobs_page.per_page != DEFAULT_PER_PAGE:
            args["per_page"] = jobs_page.per_page
        if jobs_page.q:
            args["q"] = jobs_page.q
        return url_for(".jobs", **args)

    return page_url


def _page_links(current: int, pages: int) -> List[int]:
    """The page numbers to link: the first, the last, and two either side of the current one."""
    return sorted({1, pages} | {n for n in range(current - 2, current + 3) if 1 <= n <= pages})
