"""A dashboard's settings, checked once, and the one error its pages and API answer with.

:class:`Settings` holds what :func:`~leasecron.contrib.dashboard.blueprint` was given; every
view of one blueprint closes over the same instance, so two dashboards on one Flask app (say two
stores, under two prefixes and names) never share state, and nothing here changes after the
blueprint is made. :class:`DashboardError` is how a view refuses a request: its HTTP status and
a message for a person; the page views render it as an HTML page, the API as
``{"error": message}``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Optional, Tuple

from ...cron import LeaseCron
from ...errors import ConfigError, shown
from ...stores import Store
from .security import actor

if TYPE_CHECKING:  # pragma: no cover - the types only
    from flask import Request

__all__ = ["DEFAULT_NAME", "DashboardError", "Settings", "MAX_REFRESH_MS"]

#: The blueprint's default name (and so the prefix of its endpoints: ``leasecron_dashboard.jobs``).
DEFAULT_NAME = "leasecron_dashboard"
#: The longest refresh interval of the pages (an hour); 0 turns the refresh off.
MAX_REFRESH_MS = 3_600_000


class DashboardError(Exception):
    """A request the dashboard refuses: ``status`` (an HTTP status) and ``message`` (for a person)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one dashboard serves, and how.

    ``store`` is read and written (pause, resume, trigger); ``cron``, when
    given, adds its jobs' schedules, next slots and options (and its
    registered jobs, even those that never ran); ``read_only`` hides and
    refuses every action; ``password`` requires HTTP basic authentication on
    every page and endpoint; ``refresh_ms`` is how often the pages refresh
    themselves in the browser (0: never); ``name`` the blueprint's name;
    ``actor`` (a callable given the request) the name an action is recorded
    under, instead of ``"<basic-auth user or 'dashboard'>@<host>"``;
    ``form_token`` (a callable given the request, answering a form field's
    name and value) the hidden field each form carries for an application
    that checks CSRF itself, instead of the dashboard's double submit.
    """

    store: Store
    cron: Optional[LeaseCron] = None
    read_only: bool = False
    password: Optional[str] = None
    refresh_ms: int = 2000
    name: str = DEFAULT_NAME
    actor: Optional[Callable[["Request"], str]] = None
    form_token: Optional[Callable[["Request"], Tuple[str, str]]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.store, Store):
            raise ConfigError(f"dashboard: store must be a leasecron Store, not {shown(self.store)}")
        if self.cron is not None and not isinstance(self.cron, LeaseCron):
            raise ConfigError(f"dashboard: cron must be a LeaseCron or None, not {shown(self.cron)}")
        if not isinstance(self.read_only, bool):
            raise ConfigError(f"dashboard: read_only must be True or False, not {shown(self.read_only)}")
        if self.password is not None and (not isinstance(self.password, str) or self.password == ""):
            raise ConfigError("dashboard: password must be a non-empty string, or None for no authentication")
        refresh = self.refresh_ms
        if isinstance(refresh, bool) or not isinstance(refresh, int) or not 0 <= refresh <= MAX_REFRESH_MS:
            raise ConfigError(
                f"dashboard: refresh_ms must be an integer from 0 (no refresh) to {MAX_REFRESH_MS},"
                f" not {shown(refresh)}"
            )
        if not isinstance(self.name, str) or not self.name or "." in self.name:
            raise ConfigError(f"dashboard: name must be a non-empty string without dots, not {shown(self.name)}")
        for hook in ("actor", "form_token"):
            if getattr(self, hook) is not None and not callable(getattr(self, hook)):
                raise ConfigError(f"dashboard: {hook} must be a callable or None, not {shown(getattr(self, hook))}")

    def who(self, request: "Request") -> str:
        """The name an action of ``request`` is recorded under (``by``): ``actor``'s answer, else
        :func:`.security.actor`'s."""
        return (self.actor or actor)(request)

    def __repr__(self) -> str:
        # never the password
        secret = "set" if self.password else "none"
        return (
            f"Settings(store={self.store!r}, cron={self.cron!r}, read_only={self.read_only},"
            f" password={secret}, refresh_ms={self.refresh_ms}, name={self.name!r}, actor={self.actor!r},"
            f" form_token={self.form_token!r})"
        )
