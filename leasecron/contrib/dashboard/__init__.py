"""The dashboard: every job and run of a store in a browser; pause, resume, trigger; schedules as
data; the live instances.

:func:`blueprint` mounts its pages and JSON API in a Flask app of your own (behind the app's own
login, say): ``app.register_blueprint(blueprint(store, cron=cron), url_prefix="/cron")``;
:func:`create_app` is the app ``leasecron dashboard`` serves. The pages are rendered on the
server and read fine without JavaScript. Nothing is kept between requests, so several server
processes may serve one dashboard. Flask comes with the ``dashboard`` extra (``pip install
'leasecron[dashboard]'``); the core of leasecron never imports this package. :doc:`dashboard` is
the guide (the pages, the command, the security, the API); :doc:`design` (The dashboard) says
how the package is built.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

try:
    from flask import Blueprint, Flask, Request, Response, request
    from flask.blueprints import BlueprintSetupState
except ImportError as exc:  # pragma: no cover - the test environment has Flask
    raise ImportError(
        f"leasecron.contrib.dashboard needs Flask: pip install 'leasecron[dashboard]' ({exc})"
    ) from exc

from ...cron import LeaseCron
from ...errors import ConfigError, StoreError
from ...stores import Store
from .api import add_api, error_json, is_api
from .instances import add_instances
from .links import CONVERTER, JobConverter
from .schedule_routes import add_schedule_api, add_schedule_forms
from .security import SECURITY_HEADERS, challenge, password_ok
from .settings import DEFAULT_NAME, DashboardError, Settings
from .views import add_pages, error_page

__all__ = ["blueprint", "create_app", "DashboardError", "Settings"]


def blueprint(
    store: Store,
    *,
    cron: Optional[LeaseCron] = None,
    read_only: bool = False,
    password: Optional[str] = None,
    refresh_ms: int = 2000,
    name: str = DEFAULT_NAME,
    actor: Optional[Callable[[Request], str]] = None,
    form_token: Optional[Callable[[Request], Tuple[str, str]]] = None,
) -> Blueprint:
    """The dashboard of ``store`` as a Flask blueprint: ``app.register_blueprint(bp, url_prefix="/cron")``.

    ``cron`` (your :class:`~leasecron.LeaseCron`) adds schedules, next slots
    and its registered jobs (the store's own schedules, overrides and stored
    jobs, are shown without it); ``read_only`` hides every action and refuses
    every write (403); ``password`` requires HTTP basic authentication (any
    user name) on every page and endpoint; ``refresh_ms`` is how often the
    pages refresh in the browser (0: never); ``name`` the blueprint's name
    (two dashboards on one app need two). A bad argument is a
    :class:`~leasecron.ConfigError` naming it.

    Two hooks serve an app that has its own login and CSRF protection (the
    Django integration uses both): ``actor``, called with the request, gives
    the name an action is recorded under (``by``; by default the basic-auth
    user name or ``dashboard``, ``@`` the host); ``form_token``, called with
    the request, gives the hidden field ``(name, value)`` every form carries
    (Django's ``("csrfmiddlewaretoken", get_token(request))``). With
    ``form_token`` the dashboard sets no CSRF cookie and checks no token of
    its own: the app must refuse every POST to the pages without its token.
    The API keeps its ``application/json``-only rule either way.
    """
    settings = Settings(store, cron, read_only, password, refresh_ms, name, actor, form_token)
    bp = Blueprint(name, __name__, template_folder="templates", static_folder="static", static_url_path="/static")
    bp.record_once(_add_converter)  # before any rule: the rules need it when they are added to the app

    @bp.before_request
    def authenticate() -> Optional[Response]:
        if settings.password is not None and not password_ok(request, settings.password):
            return challenge()
        return None

    @bp.after_request
    def secure(response: Response) -> Response:
        for header, value in SECURITY_HEADERS.items():
            response.headers.setdefault(header, value)
        if not (request.endpoint or "").endswith(".static"):
            response.headers.setdefault("Cache-Control", "no-store")  # live data: never from a cache
        return response

    def refuse(status: int, message: str) -> Response:
        return error_json(status, message) if is_api() else error_page(settings, status, message)

    @bp.errorhandler(DashboardError)
    def refused(exc: DashboardError) -> Response:
        return refuse(exc.status, exc.message)

    @bp.errorhandler(ConfigError)
    def bad_input(exc: ConfigError) -> Response:
        return refuse(400, str(exc))

    @bp.errorhandler(StoreError)
    def store_failed(exc: StoreError) -> Response:
        return refuse(503, f"the store failed: {type(exc).__name__}: {exc}")

    add_pages(bp, settings)
    add_schedule_forms(bp, settings)
    add_api(bp, settings)
    add_schedule_api(bp, settings)
    add_instances(bp, settings)
    return bp


def _add_converter(state: BlueprintSetupState) -> None:
    converters = state.app.url_map.converters
    if converters.setdefault(CONVERTER, JobConverter) is not JobConverter:
        raise ConfigError(f"the Flask app has a URL converter {CONVERTER!r} of its own: the dashboard needs the name")


def create_app(store: Store, **options: Any) -> Flask:
    """A Flask app that serves the dashboard of ``store`` at ``/`` (what ``leasecron dashboard``
    serves); ``options`` are :func:`blueprint`'s (``cron``, ``read_only``, ``password``,
    ``refresh_ms``), all but ``name``."""
    app = Flask(__name__, static_folder=None)  # the blueprint's static folder serves /static
    app.register_blueprint(blueprint(store, **options))
    return app
