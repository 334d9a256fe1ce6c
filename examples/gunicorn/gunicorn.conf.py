"""gunicorn settings for app.py: each worker runs the app's LeaseCron.

    LEASECRON_STORE=redis://localhost:6379/0 gunicorn -c gunicorn.conf.py app:app
"""

from leasecron.contrib.gunicorn import hooks

bind = "127.0.0.1:8000"
workers = 3  # sync workers; worker_class = "gthread" with threads = 4 works as well
# preload_app = True  # works too: the master imports the app but runs no job
graceful_timeout = 30  # a stopping worker's time: keep it above the cron's stop_timeout_ms (10 s)

# on_starting, pre_fork: the master runs no job;  post_fork: cron.start() in each worker;
# worker_exit: cron.stop(), live runs handed over (on a HUP, once a new worker runs the cron:
# on_reload counts the HUPs);  worker_abort: a worker killed for its timeout stops at once.
globals().update(hooks("app:cron"))
