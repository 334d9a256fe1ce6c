"""The routes of schedules as data: the pages' forms and the JSON API (operations in :mod:`.schedules`).

Forms (POST, CSRF-checked like pause and resume, answered with 303 to the page they came from):
``/jobs/<job>/schedule`` (fields ``schedule`` and ``tz``: an override), ``/jobs/<job>/reset``,
``/jobs/<job>/delete`` (a stored job), and ``/stored-jobs`` (fields ``name``, ``task``,
``schedule``, ``tz``, and ``kwargs`` and ``options`` as JSON objects: create or replace a stored
job). A form whose values are refused comes back to its page flashing the
reason, and nothing is stored.

API (writes take only ``application/json`` bodies, see :func:`~.api.json_body`; a bad body is a
400 naming the fault): ``PUT /api/jobs/<job>/schedule`` (``{"schedule", "tz"}``), ``DELETE
/api/jobs/<job>/schedule`` (reset), ``GET /api/stored-jobs``, and ``GET``, ``PUT``
(``{"task", "schedule", "tz", "kwargs", "options"}``) and ``DELETE /api/stored-jobs/<name>``.
As everywhere in the dashboard, each route has a twin that takes the name as ``?job=``
(``/jobs/<job>/schedule`` and ``/job/schedule?job=``; ``/api/stored-jobs/<name>`` and
``/api/stored-job?job=``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from flask import Blueprint, Response, jsonify, request
from werkzeug.wrappers import Response as BaseResponse

from ...errors import ConfigError
from .actions import check_writable
from .api import json_body
from .links import JOB, job_of
from .schedules import (
    delete_stored,
    form_object,
    form_schedule,
    put_stored,
    read_stored_job,
    read_stored_jobs,
    reschedule,
    reset,
)
from .settings import DashboardError, Settings
from .views import check_form, form_done

__all__ = ["add_schedule_api", "add_schedule_forms"]

#: The fields of ``PUT /api/jobs/<job>/schedule`` and ``PUT /api/stored-jobs/<name>``.
SCHEDULE_FIELDS = ("schedule", "tz")
STORED_FIELDS = ("task", "schedule", "tz", "kwargs", "options")
#: A form's refusals that come back to the page as a flash (read-only and CSRF are refused whole).
FLASHED = (400, 404, 409)

Operation = Callable[[Optional[str]], Tuple[str, Dict[str, Any]]]


def _optional_text(name: str) -> Optional[str]:
    """A form's text field, None when empty (an empty ``tz``: the job's or the instances' own)."""
    value = request.form.get(name, "").strip()
    return value or None


def add_schedule_forms(bp: Blueprint, settings: Settings) -> None:
    """Add the forms' endpoints to ``bp``: ``reschedule``, ``reset``, ``delete_stored`` and ``put_stored``."""

    def form(operation: Operation) -> Callable[..., BaseResponse]:
        def view(job: Optional[str] = None) -> BaseResponse:
            check_form(settings)
            try:
                message, _ = operation(job)
            except ConfigError as exc:
                return form_done(f"Nothing stored: {exc}", error=True)
            except DashboardError as exc:
                if exc.status not in FLASHED:
                    raise
                return form_done(f"Nothing stored: {exc.message}", error=True)
            return form_done(message)

        return view

    def reschedule_form(job: Optional[str]) -> Tuple[str, Dict[str, Any]]:
        schedule = form_schedule(request.form.get("schedule", ""))
        return reschedule(settings, job_of(job), settings.who(request), schedule, _optional_text("tz"))

    def reset_form(job: Optional[str]) -> Tuple[str, Dict[str, Any]]:
        return reset(settings, job_of(job), settings.who(request))

    def delete_form(job: Optional[str]) -> Tuple[str, Dict[str, Any]]:
        return delete_stored(settings, job_of(job), settings.who(request))

    def put_form(_: Optional[str]) -> Tuple[str, Dict[str, Any]]:
        name = request.form.get("name", "").strip()
        if not name:
            raise ConfigError("give the stored job a name")
        return put_stored(settings, name, settings.who(request), task=request.form.get("task", "").strip(),
                          schedule=form_schedule(request.form.get("schedule", "")), tz=_optional_text("tz"),
                          kwargs=form_object("kwargs", request.form.get("kwargs", "")),
                          options=form_object("options", request.form.get("options", "")))  # fmt: skip

    for endpoint, path, operation in (
        ("reschedule", "schedule", reschedule_form),
        ("reset", "reset", reset_form),
        ("delete_stored", "delete", delete_form),
    ):
        view = form(operation)
        view.__name__ = f"{endpoint}_form"
        bp.add_url_rule(f"/jobs/{JOB}/{path}", endpoint, view, methods=["POST"])
        bp.add_url_rule(f"/job/{path}", endpoint, view, methods=["POST"])
    put_view = form(put_form)
    put_view.__name__ = "put_stored_form"
    bp.add_url_rule("/stored-jobs", "put_stored", put_view, methods=["POST"])


def _body(settings: Settings, fields: Sequence[str], required: Sequence[str], example: str) -> Dict[str, Any]:
    """A write's JSON object with only ``fields``, and a value (not null) for each of ``required``;
    a read-only dashboard refuses first (403), whatever the body."""
    check_writable(settings)
    body = json_body(example)
    unknown = sorted(set(body) - set(fields))
    if unknown:
        takes = ", ".join(fields) or "no fields"
        raise DashboardError(400, f"unknown field {unknown[0]!r}: the body takes {takes}, such as {example}")
    for name in required:
        if body.get(name) is None:
            raise DashboardError(400, f"the body needs {name!r}, such as {example}")
    return body


def add_schedule_api(bp: Blueprint, settings: Settings) -> None:
    """Add the API's endpoints of stored schedules to ``bp``."""

    def api_reschedule(job: Optional[str] = None) -> Response:
        body = _body(settings, SCHEDULE_FIELDS, ("schedule",), '{"schedule": "*/5 * * * *", "tz": "Europe/Berlin"}')
        _, answer = reschedule(settings, job_of(job), settings.who(request), body["schedule"], body.get("tz"))
        return jsonify(answer)

    def api_stored_jobs() -> Response:
        return jsonify({"stored_jobs": [job.to_dict() for job in read_stored_jobs(settings)]})

    def api_stored_job(job: Optional[str] = None) -> Response:
        return jsonify(read_stored_job(settings, job_of(job)).to_dict())

    def api_put_stored(job: Optional[str] = None) -> Response:
        example = '{"task": "send_report", "schedule": "0 9 * * 1-5", "tz": "Europe/Berlin", "kwargs": {"team": 3}}'
        body = _body(settings, STORED_FIELDS, ("task", "schedule"), example)
        who = settings.who(request)
        _, answer = put_stored(settings, job_of(job), who, task=body["task"], schedule=body["schedule"],
                               tz=body.get("tz"), kwargs=body.get("kwargs"), options=body.get("options"))  # fmt: skip
        return jsonify(answer)

    def removal(operation: Callable[[Settings, str, str], Tuple[str, Dict[str, Any]]], name: str) -> Any:
        def view(job: Optional[str] = None) -> Response:
            _body(settings, (), (), "{}")
            _, answer = operation(settings, job_of(job), settings.who(request))
            return jsonify(answer)

        view.__name__ = name
        return view

    api_reset, api_delete_stored = removal(reset, "api_reset"), removal(delete_stored, "api_delete_stored")
    for path in (f"/api/jobs/{JOB}/schedule", "/api/job/schedule"):
        bp.add_url_rule(path, "api_reschedule", api_reschedule, methods=["PUT"])
        bp.add_url_rule(path, "api_reset", api_reset, methods=["DELETE"])
    bp.add_url_rule("/api/stored-jobs", "api_stored_jobs", api_stored_jobs)
    for path in (f"/api/stored-jobs/{JOB}", "/api/stored-job"):
        bp.add_url_rule(path, "api_stored_job", api_stored_job)
        bp.add_url_rule(path, "api_put_stored", api_put_stored, methods=["PUT"])
        bp.add_url_rule(path, "api_delete_stored", api_delete_stored, methods=["DELETE"])
