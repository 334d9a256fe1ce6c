"""The dashboard's URLconf: ``path("cron/", include("leasecron.contrib.django.urls"))`` in the
project's ``urls.py`` serves the dashboard's pages and JSON API under ``/cron/``, to staff users
only (:mod:`leasecron.contrib.django.dashboard` says how). Its namespace is ``leasecron``:
``reverse("leasecron:dashboard", args=[""])`` is the jobs page.

Importing it checks ``settings.LEASECRON_DASHBOARD`` (Django imports the URLconf at the first
request, and ``manage.py check`` does too), so a bad option fails there, naming it.
"""

from __future__ import annotations

from django.urls import re_path  # type: ignore[import-untyped]

from .dashboard import api, dashboard_options, pages

__all__ = ["app_name", "urlpatterns"]

app_name = "leasecron"

dashboard_options()

urlpatterns = [
    re_path(r"^(?P<subpath>api/.*)\Z", api, name="api"),
    re_path(r"^(?P<subpath>.*)\Z", pages, name="dashboard"),
]
