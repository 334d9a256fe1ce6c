"""The JSON API: the pages' data and actions for scripts.

``GET /api/jobs`` and ``GET /api/jobs/<job>/runs`` serve the data of the jobs page and of a
job's page; ``POST /api/jobs/<job>/pause``, ``.../resume`` and ``.../trigger`` act; the routes
of stored schedules are in :mod:`.schedule_routes`. A write takes only a ``Content-Type:
application/json`` body (else 415, :func:`json_body`): a cross-site HTML form cannot send one,
so the API needs no CSRF token. A refusal is ``{"error": message}`` with its status.
``docs/dashboard.rst`` (The JSON API) gives each route's parameters and answer.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from flask import Blueprint, Response, jsonify, request

from .actions import ACTIONS, act, check_writable
from .links import JOB, job_of
from .rows import DEFAULT_RUNS, MAX_RUNS, job_dict, number_arg, paging, read_job, read_jobs_page, status_arg
from .settings import DashboardError, Settings

__all__ = ["add_api", "error_json", "is_api", "json_body"]

#: The endpoints of the API start with this (``leasecron_dashboard.api_jobs``).
API_PREFIX = "api_"


def is_api() -> bool:
    """Whether the current request is one of the API's (its refusals are JSON)."""
    return (request.endpoint or "").partition(".")[2].startswith(API_PREFIX)


def error_json(status: int, message: str) -> Response:
    """A refusal as the API answers it: ``{"error": message}`` with ``status``."""
    response = jsonify({"error": message})
    response.status_code = status
    return response


def json_body(example: str) -> Dict[str, Any]:
    """The request's JSON object (``{}`` for an empty body); 415 unless its type is
    ``application/json``, 400 naming the fault for anything but a JSON object (``example`` shows
    one)."""
    if request.mimetype != "application/json":
        raise DashboardError(415, f"the API takes Content-Type: application/json, not {request.mimetype!r}")
    raw = request.get_data()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise DashboardError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise DashboardError(400, f"the body must be a JSON object, such as {example}")
    return body


def add_api(bp: Blueprint, settings: Settings) -> None:
    """Add the API's endpoints to ``bp``."""

    def api_jobs() -> Response:
        number, per_page = paging(request.args)
        found = read_jobs_page(settings.store, settings.cron, number, per_page, request.args.get("q", ""))
        return jsonify(
            {
                "now_ms": found.now_ms,
                "page": found.page,
                "per_page": found.per_page,
                "pages": found.pages,
                "total": found.total,
                "jobs": [job_dict(view, found.now_ms) for view in found.jobs],
            }
        )

    def api_runs(job: Optional[str] = None) -> Response:
        name = job_of(job)
        limit = number_arg(request.args, "limit", DEFAULT_RUNS, MAX_RUNS)
        now_ms, view = read_job(settings.store, settings.cron, name, status_arg(request.args), limit)
        return jsonify({"job": name, "now_ms": now_ms, "runs": [run.to_dict() for run in view.runs]})

    bp.add_url_rule("/api/jobs", "api_jobs", api_jobs)
    bp.add_url_rule(f"/api/jobs/{JOB}/runs", "api_runs", api_runs)
    bp.add_url_rule("/api/job/runs", "api_runs", api_runs)
    for action in ACTIONS:
        view = _action_view(settings, action)
        bp.add_url_rule(f"/api/jobs/{JOB}/{action}", f"api_{action}", view, methods=["POST"])
        bp.add_url_rule(f"/api/job/{action}", f"api_{action}", view, methods=["POST"])


def _action_view(settings: Settings, action: str) -> Any:
    def view(job: Optional[str] = None) -> Response:
        check_writable(settings)
        body = json_body('{"note": "..."}')
        note = body.get("note")
        if action == "pause" and note is not None and not isinstance(note, str):
            raise DashboardError(400, "\"note\" must be a string or null")
        who = settings.who(request)
        _, answer = act(settings, action, job_of(job), who, note if action == "pause" else None)
        return jsonify(answer)

    view.__name__ = f"api_{action}"
    return view
