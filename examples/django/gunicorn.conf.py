"""gunicorn settings of the example project: every worker runs the project's cron, and the store
lets one of them run each slot.

    LEASECRON_STORE=redis://localhost:6379/0 gunicorn -c gunicorn.conf.py
"""
import os

from leasecron.contrib.gunicorn import hooks

# Set here, in the master, so that the workers have it when post_fork asks for the cron (which sets
# Django up in the worker: the apps are loaded and every app's cron.py is imported before it starts).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

wsgi_app = "wsgi:application"
bind = "127.0.0.1:8000"
workers = 3  # sync workers; worker_class = "gthread" and preload_app = True work as well
graceful_timeout = 30  # above LEASECRON["stop_timeout_ms"] (10 s): a stopping worker hands its runs over

globals().update(hooks("leasecron.contrib.django:cron"))  # post_fork: cron.start(); worker_exit: cron.stop()
