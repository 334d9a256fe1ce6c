"""The test project's settings, set by the tests through the environment.

``LEASECRON_SETTING``: settings.LEASECRON as JSON (``unset``: no LEASECRON setting at all).
``SHOP_DB``: ``sqlite:PATH`` or ``postgresql:HOST:PORT:DBNAME:SCHEMA:APPLICATION_NAME``.
``SHOP_CONN_MAX_AGE``: seconds, or ``none`` (forever); ``SHOP_HEALTH_CHECKS``: ``1`` for
``CONN_HEALTH_CHECKS``. ``SHOP_EVERY``: the interval of the ``shop.tick`` job, in seconds.
``LEASECRON_DASHBOARD_SETTING``: settings.LEASECRON_DASHBOARD as JSON (unset: none). The URLconf
(``urls.py``) mounts the dashboard at ``/cron/`` and has a login page at ``/login/``;
``SHOP_CSRF_MIDDLEWARE``: ``0`` leaves ``CsrfViewMiddleware`` out of ``MIDDLEWARE``.
"""

import json
import os
from typing import Any, Dict

SECRET_KEY = "leasecron-tests-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "leasecron.contrib.django",
    "shop",
]


def _database() -> Dict[str, Any]:
    kind, _, rest = os.environ.get("SHOP_DB", "sqlite:shop.sqlite3").partition(":")
    age = os.environ.get("SHOP_CONN_MAX_AGE", "0")
    common: Dict[str, Any] = {
        "CONN_MAX_AGE": None if age == "none" else int(age),
        "CONN_HEALTH_CHECKS": os.environ.get("SHOP_HEALTH_CHECKS") == "1",
    }
    if kind == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": rest, **common}
    host, port, name, schema, application = rest.split(":")
    options = {"options": f"-c search_path={schema}", "application_name": application}
    return {"ENGINE": "django.db.backends.postgresql", "HOST": host, "PORT": port, "NAME": name, "OPTIONS": options,
            **common}  # fmt: skip


DATABASES = {"default": _database()}

if os.environ.get("LEASECRON_SETTING", "unset") != "unset":
    LEASECRON = json.loads(os.environ["LEASECRON_SETTING"])

ROOT_URLCONF = "urls"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
LOGIN_URL = "/login/"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
if os.environ.get("SHOP_CSRF_MIDDLEWARE") == "0":
    MIDDLEWARE.remove("django.middleware.csrf.CsrfViewMiddleware")
if "LEASECRON_DASHBOARD_SETTING" in os.environ:
    LEASECRON_DASHBOARD = json.loads(os.environ["LEASECRON_DASHBOARD_SETTING"])
