"""The dashboard in a Django project's URLconf: ``path("cron/", include("leasecron.contrib.django.urls"))``.

The pages and the JSON API are :mod:`leasecron.contrib.dashboard`'s: one Flask app, built on the
first request around the project's cron (:func:`~leasecron.contrib.django.get_cron`: its store and
its registered jobs, as ``leasecron dashboard --app`` shows them), is called as a WSGI application
from two Django views (:func:`pages` and :func:`api`), with ``SCRIPT_NAME`` set to the path the
URLconf mounts it at, so that every link and cookie of the dashboard stays under it.

Django decides who may look and act, the dashboard does the rest:

* only an active staff user (``request.user.is_staff``) is served; any other page request is
  redirected to the login page (``settings.LOGIN_URL``, with ``?next=``), any other API request
  answers 403 with ``{"error": ...}`` as the API's other refusals do;
* an action is recorded in the store under the user's name (``get_username()``), through the
  blueprint's ``actor`` hook;
* the pages' forms carry Django's CSRF token (the blueprint's ``form_token`` hook) and the page view
  is ``csrf_protect``-ed, so a POST without the token is refused by Django (403) even in a project
  without ``CsrfViewMiddleware``; the API is ``csrf_exempt`` and keeps the dashboard's own rule
  (its writes take only ``application/json`` bodies, which no cross-site form can send).

``settings.LEASECRON_DASHBOARD`` (optional) takes the blueprint's ``read_only`` and ``refresh_ms``:
``LEASECRON_DASHBOARD = {"read_only": True}`` hides every action and refuses every write.
"""

from __future__ import annotations

import io
import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlencode

from django.conf import settings as django_settings  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.http import HttpRequest, HttpResponse, JsonResponse  # type: ignore[import-untyped]
from django.http.request import RawPostDataException  # type: ignore[import-untyped]
from django.middleware.csrf import get_token  # type: ignore[import-untyped]
from django.views.decorators.csrf import csrf_exempt, csrf_protect  # type: ignore[import-untyped]
from flask import Flask, Request

from ...errors import ConfigError, shown
from ...stores.memory import MemoryStore
from ..dashboard import Settings as DashboardSettings, create_app
from .project import get_cron

__all__ = ["SETTING", "OPTIONS", "api", "dashboard_options", "get_app", "pages"]

#: The Django setting of the dashboard's options (optional).
SETTING = "LEASECRON_DASHBOARD"
#: The keys it takes: :func:`leasecron.contrib.dashboard.blueprint`'s arguments of the same names.
OPTIONS = ("read_only", "refresh_ms")
#: The form field Django's CSRF check reads (``CsrfViewMiddleware``).
CSRF_FIELD = "csrfmiddlewaretoken"
#: What a view hands the Flask app in the WSGI environ: the user's name, the page's CSRF token.
USER_KEY = "leasecron.django.user"
TOKEN_KEY = "leasecron.django.csrf_token"
REFUSED = "the dashboard's API is for staff users logged in to the project"

_FROM_DJANGO: Any = object()


def dashboard_options(value: Any = _FROM_DJANGO) -> Dict[str, Any]:
    """``settings.LEASECRON_DASHBOARD`` (or ``value``) as the blueprint's keyword arguments ({} when
    it is not set); :class:`~leasecron.ConfigError` naming a value that is not a dict, an unknown key
    or a bad value (as the blueprint checks it)."""
    if value is _FROM_DJANGO:
        value = getattr(django_settings, SETTING, None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"settings.{SETTING} must be a dict such as {{'read_only': True}}, not {shown(value)}")
    unknown = [key for key in value if key not in OPTIONS]
    if unknown:
        raise ConfigError(f"settings.{SETTING} has unknown key {unknown[0]!r}: it takes {', '.join(OPTIONS)}")
    try:  # the blueprint's own checks of the values, on a store that opens nothing
        DashboardSettings(MemoryStore(), **value)
    except ConfigError as exc:
        raise ConfigError(f"settings.{SETTING}: {exc}") from None
    return dict(value)


def _user(request: Request) -> str:
    return str(request.environ[USER_KEY])


def _form_token(request: Request) -> Tuple[str, str]:
    return CSRF_FIELD, str(request.environ[TOKEN_KEY])


_lock = threading.Lock()
_app: Optional[Flask] = None


def get_app() -> Flask:
    """The Flask app of the dashboard, built on the first call (and kept) around the project's cron,
    with ``settings.LEASECRON_DASHBOARD``'s options (:func:`dashboard_options`)."""
    global _app
    with _lock:
        if _app is None:
            options = dashboard_options()
            cron = get_cron()
            app = create_app(cron.store, cron=cron, actor=_user, form_token=_form_token, **options)
            app.config["PROPAGATE_EXCEPTIONS"] = True  # an unexpected error is Django's to handle and log
            _app = app
        return _app


def _serve(request: HttpRequest, subpath: str, is_api: bool) -> HttpResponse:
    user = getattr(request, "user", None)
    if user is None:
        raise ImproperlyConfigured(
            "the leasecron dashboard needs request.user: add django.contrib.sessions.middleware.SessionMiddleware"
            " and django.contrib.auth.middleware.AuthenticationMiddleware to MIDDLEWARE"
        )
    if not (user.is_active and user.is_staff):
        if is_api:
            return JsonResponse({"error": REFUSED}, status=403)
        from django.contrib.auth.views import redirect_to_login  # type: ignore[import-untyped]  # needs the apps

        return redirect_to_login(request.get_full_path())
    environ = _environ(request, subpath)
    environ[USER_KEY] = user.get_username()
    if not is_api:
        environ[TOKEN_KEY] = get_token(request)
    return call_wsgi(get_app(), environ)


def _wsgi(text: str) -> str:
    """A decoded path as a WSGI environ holds it: its UTF-8 bytes as latin-1 characters."""
    return text.encode("utf-8").decode("latin-1")


def _environ(request: HttpRequest, subpath: str) -> Dict[str, Any]:
    """The WSGI environ of ``request`` for the app mounted where the URLconf matched: ``SCRIPT_NAME``
    the path up to ``subpath``, ``PATH_INFO`` ``/subpath``, the body (already read by Django) anew."""
    environ: Dict[str, Any] = dict(request.META)  # the server's environ (WSGI), or its like (ASGI)
    environ.pop("wsgi.file_wrapper", None)  # the answer is read here, not sent by the server
    mount = request.path[: len(request.path) - len(subpath)]
    try:
        body = request.body
    except RawPostDataException:  # a multipart form, read by the CSRF check: its fields again, urlencoded
        body = urlencode(list(request.POST.lists()), doseq=True).encode("ascii")
        environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
    environ.update({
        "SCRIPT_NAME": _wsgi(mount.rstrip("/")),
        "PATH_INFO": _wsgi("/" + subpath),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": request.scheme,
        "wsgi.version": (1, 0),
        "wsgi.errors": environ.get("wsgi.errors", sys.stderr),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    })  # fmt: skip
    environ.setdefault("SERVER_PROTOCOL", "HTTP/1.1")
    return environ


def call_wsgi(app: Callable[..., Any], environ: Dict[str, Any]) -> HttpResponse:
    """Call the WSGI application ``app`` with ``environ``; its answer as an :class:`HttpResponse`
    (status, headers, cookies, the whole body)."""
    started: List[Any] = []
    chunks: List[bytes] = []

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [status, headers]
        return chunks.append

    result = app(environ, start_response)
    try:
        chunks.extend(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    status, headers = started
    code, _, reason = status.partition(" ")
    response = HttpResponse(b"".join(chunks), status=int(code), reason=reason or None)
    for name, value in headers:
        if name.lower() == "set-cookie":
            response.cookies.load(value)
        else:
            response.headers[name] = value
    return response


View = Callable[[HttpRequest, str], HttpResponse]
#: Django's decorators, typed (Django ships no types).
_protect: Callable[[View], View] = csrf_protect
_exempt: Callable[[View], View] = csrf_exempt


@_protect
def pages(request: HttpRequest, subpath: str) -> HttpResponse:
    """The dashboard's pages and forms (``subpath``: the path under the mount), for staff users;
    another user is redirected to the login page. A form's POST needs Django's CSRF token."""
    return _serve(request, subpath, is_api=False)


@_exempt
def api(request: HttpRequest, subpath: str) -> HttpResponse:
    """The dashboard's JSON API (``subpath``: ``api/...``), for staff users; 403 for another user.
    Its writes take only ``application/json`` bodies (the dashboard's rule), so no CSRF token."""
    return _serve(request, subpath, is_api=True)
