"""Links to a job's pages that lead back to that very job, whatever its name.

A name is percent-encoded whole in a path (:class:`JobConverter`). ``.``, ``..`` and a name
whose decoded path the URL map would route elsewhere cannot be path segments, so their links use
the query form, ``/job?job=..``: every route has a twin without the name in its path, and every
route takes ``?job=`` (:func:`job_of`). :func:`job_url` picks the form. ``docs/design.rst``
(The dashboard) says which names need which form, and why.
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import quote, unquote

from flask import current_app, request, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.routing import PathConverter
from werkzeug.routing.exceptions import RoutingException

from .settings import DashboardError

__all__ = ["CONVERTER", "JOB", "JobConverter", "job_of", "job_url", "quoted"]

#: The name of the URL converter of job names (a name unlikely to clash with an app's own).
CONVERTER = "leasecron_job"
#: The job's part of a route: ``f"/jobs/{JOB}/runs"``.
JOB = f"<{CONVERTER}:job>"


def quoted(name: str) -> str:
    """``name`` percent-encoded whole, ``/`` included: one path segment or one query value."""
    return quote(name, safe="")


class JobConverter(PathConverter):
    """The ``job`` URL converter: matches as ``path`` does, builds with :func:`quoted`."""

    def to_url(self, value: Any) -> str:
        """The name percent-encoded whole (``a/b`` → ``a%2Fb``)."""
        return quoted(str(value))


def job_url(endpoint: str, job: str, method: str = "GET", **values: Any) -> str:
    """The URL of ``endpoint`` (``.job``, ``.run``, …) for ``job``: the path form where it routes
    back to this job, else the query form (``…?job=NAME``). ``values`` are the route's other
    arguments (``slot_ms``) and query arguments (``status``)."""
    if job not in (".", "..") and ("/" not in job or _routes_back(endpoint, job, method, values)):
        return url_for(endpoint, job=job, **values)
    url = url_for(endpoint, **values)
    return f"{url}{'&' if '?' in url else '?'}job={quoted(job)}"


def _routes_back(endpoint: str, job: str, method: str, values: Any) -> bool:
    """Whether the path form of the link is routed to ``endpoint`` with ``job`` and ``values``."""
    path = url_for(endpoint, job=job, **values).partition("?")[0]
    root = request.script_root
    if not path.startswith(root + "/"):
        return False
    adapter = current_app.url_map.bind("localhost", script_name=root or None)
    try:
        found, args = adapter.match(unquote(path[len(root):]), method=method)
    except (HTTPException, RoutingException):
        return False
    same = all(args.get(key, value) == value for key, value in values.items())
    return bool(found == _full(endpoint) and args.get("job") == job and same)


def _full(endpoint: str) -> str:
    """``.run`` → ``leasecron_dashboard.run``: the endpoint as the URL map names it."""
    if endpoint.startswith(".") and request.blueprint:
        return f"{request.blueprint}{endpoint}"
    return endpoint


def job_of(path_job: Optional[str]) -> str:
    """The job a request names: ``?job=`` when given (the query form, taken by every route),
    else the name in its path; a :class:`DashboardError` (400) when there is neither."""
    job = request.args.get("job", path_job)
    if job is None or job == "":
        raise DashboardError(400, "no job named: give it in the path (/jobs/NAME) or as ?job=NAME")
    return job
