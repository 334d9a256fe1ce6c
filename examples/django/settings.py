"""Settings of the example project: one app, ``ticks``, whose job records each run through the ORM.

LEASECRON_STORE (a store URL) is the store every instance shares; without it, a SQLite file here
(for the processes of one host only). EXAMPLE_DB is the project's database (a SQLite file here).
"""
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "urls"
USE_TZ = True
TIME_ZONE = "UTC"  # Django sets the process's TZ to it (its default is America/Chicago)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "leasecron.contrib.django",  # the checks, and each app's cron.py imported when the apps are ready
    "ticks",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DB", str(BASE_DIR / "db.sqlite3")),
        "OPTIONS": {"timeout": 20},  # the workers of every gunicorn write to it
    }
}

LEASECRON = {
    "STORE": os.environ.get("LEASECRON_STORE", f"sqlite:///{BASE_DIR / 'leasecron.db'}"),
    "stop_timeout_ms": 10_000,  # how long a stopping worker waits for its handlers (under graceful_timeout)
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s [%(process)d] %(levelname)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"ticks": {"handlers": ["stderr"], "level": "INFO"}},
}
