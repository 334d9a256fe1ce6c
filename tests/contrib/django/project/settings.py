"""The test project's settings, set by the tests through the environment.

``LEASECRON_SETTING``: settings.LEASECRON as JSON (``unset``: no LEASECRON setting at all).
``SHOP_DB``: ``sqlite:PATH`` or ``postgresql:HOST:PORT:DBNAME:SCHEMA:APPLICATION_NAME``.
``SHOP_CONN_MAX_AGE``: seconds, or ``none`` (forever); ``SHOP_HEALTH_CHECKS``: ``1`` for
``CONN_HEALTH_CHECKS``. ``SHOP_EVERY``: the interval of the ``shop.tick`` job, in seconds.
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
