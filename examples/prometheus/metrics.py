"""leasecron's Prometheus metrics on http://127.0.0.1:8000/metrics (pip install 'leasecron[prometheus]').

Run one or more copies against the same store; each serves the metrics of its own instance::

    LEASECRON_STORE=sqlite:///leasecron.db METRICS_PORT=8000 python examples/prometheus/metrics.py
    curl -s http://127.0.0.1:8000/metrics | grep '^leasecron_'

SIGTERM or Ctrl-C stops it gracefully (a live run is handed over).
"""

import logging
import os

from prometheus_client import start_http_server

import leasecron
from leasecron.contrib.prometheus import instrument

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

cron = leasecron.LeaseCron(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))


@cron.job("* * * * *", name="report")  # every minute; the latest minute is caught up on start
def report(ctx: leasecron.Context) -> None:
    logging.getLogger("report").info("report: the report of %s (attempt %d)", ctx.slot, ctx.attempt)


instrument(cron)  # before start(): counts claims and runs, times claims, measures takeovers
start_http_server(int(os.environ.get("METRICS_PORT", "8000")), addr="127.0.0.1")
cron.run_forever()  # until SIGTERM or SIGINT
