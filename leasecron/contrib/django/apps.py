"""The app config of ``leasecron.contrib.django``: registers the checks, and imports each installed
app's ``cron`` module once the apps are ready."""

from __future__ import annotations

from django.apps import AppConfig  # type: ignore[import-untyped]
from django.core import checks  # type: ignore[import-untyped]
from django.utils.module_loading import autodiscover_modules  # type: ignore[import-untyped]

from .checks import TAG, check_leasecron
from .conf import read_settings

__all__ = ["LeaseCronConfig", "MODULE"]

#: The module of each app that declares its jobs.
MODULE = "cron"


class LeaseCronConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    """``"leasecron.contrib.django"`` in ``INSTALLED_APPS``: app label ``leasecron``."""

    name = "leasecron.contrib.django"
    label = "leasecron"
    verbose_name = "leasecron"

    def ready(self) -> None:
        """Register the system checks (tag ``leasecron``), then import every installed app's
        ``cron`` module (an app without one is passed over; one that fails to import fails the
        start, as Django's own autodiscovery does). While ``settings.LEASECRON`` has a problem,
        no ``cron`` module is imported, so that ``manage.py check`` can report it: the project's
        cron would raise it at the first ``from leasecron.contrib.django import cron``."""
        checks.register(check_leasecron, TAG)
        _, problems = read_settings()
        if not problems:
            autodiscover_modules(MODULE)
