"""gunicorn settings for app.py: every worker runs the app's LeaseCron, and the store picks one per slot.

    LEASECRON_STORE=redis://localhost:6379/0 gunicorn -c gunicorn.conf.py app:app
"""
from leasecron.contrib.gunicorn import hooks

bind = "127.0.0.1:8000"
workers = 3  # sync workers; worker_class = "gthread" and preload_app = True work as well
graceful_timeout = 30  # above the cron's stop_timeout_ms (10 s): a stopping worker hands its runs over

globals().update(hooks("app:cron"))  # post_fork: cron.start() in each worker; worker_exit: cron.stop()
