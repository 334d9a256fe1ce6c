"""The dashboard inside an existing Flask app, behind the app's own login.

The app has its own users and login page. The dashboard's pages and JSON API
are mounted under /cron, and the app's check runs before every one of their
views (the blueprint's before_request): a visitor who is not logged in as an
operator is sent to the login page, and an API client gets 401.

    SECRET_KEY=... OPS_PASSWORD=... flask --app app run    # then open http://127.0.0.1:5000/cron/
"""
import hmac
import os

from flask import Flask, abort, redirect, request, session, url_for

import leasecron
from leasecron.contrib.dashboard import blueprint

cron = leasecron.LeaseCron(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))


@cron.job("*/5 * * * *", name="cleanup")
def cleanup(ctx: leasecron.Context) -> None:
    pass  # started elsewhere (a worker, `leasecron run`): the web app only shows and controls it


LOGIN_FORM = """<form method="post"><input name="user"> <input name="password" type="password">
<button>Log in</button></form>"""


def create_app() -> Flask:
    app = Flask(__name__)
    app.secret_key = os.environ["SECRET_KEY"]
    operators = {"ops": os.environ["OPS_PASSWORD"]}  # the app's own users

    @app.route("/login", methods=["GET", "POST"])
    def login():
        if request.method == "POST":
            password = operators.get(request.form.get("user", ""), "")
            if password and hmac.compare_digest(request.form.get("password", ""), password):
                session["user"] = request.form["user"]
                return redirect("/cron/")
        return LOGIN_FORM

    # read_only=True would show the pages without any pause, resume or trigger.
    dashboard = blueprint(cron.store, cron=cron)  # cron: each job's schedule and next slot

    @dashboard.before_request
    def operators_only():
        if session.get("user") not in operators:
            if request.path.startswith("/cron/api/"):
                abort(401)
            return redirect(url_for("login"))
        return None

    app.register_blueprint(dashboard, url_prefix="/cron")
    return app
