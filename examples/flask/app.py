"""A Flask app whose cron jobs run on one instance per slot, inside the app context.

    flask --app app leasecron run    # a scheduler process (or start it in gunicorn's post_fork)
    flask --app app leasecron jobs   # each job's schedule, last run and next slot
    flask --app app leasecron runs   # the stored runs
"""
import os

from flask import Flask, current_app

import leasecron
from leasecron.contrib.flask import LeaseCronExtension

scheduler = LeaseCronExtension()


@scheduler.job("*/5 * * * *", name="cleanup")
def cleanup(ctx: leasecron.Context) -> None:
    # current_app, its config and its extensions work here as in a request.
    days = current_app.config["KEEP_DAYS"]
    current_app.logger.info("cleanup of slot %s: removing what is older than %d days", ctx.slot, days)


def create_app() -> Flask:
    app = Flask(__name__)
    app.config["KEEP_DAYS"] = 30
    app.config["LEASECRON_STORE"] = os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db")
    app.config["LEASECRON_LEASE_MS"] = 60_000  # every LEASECRON_* key sets an option of LeaseCron
    scheduler.init_app(app)  # builds app.extensions["leasecron"]; does not start it
    return app
