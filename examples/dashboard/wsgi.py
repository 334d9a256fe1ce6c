"""The dashboard as a WSGI app of its own, for a server you run (more workers, TLS, a socket).

    LEASECRON_STORE=redis://127.0.0.1:6379/0 gunicorn -w 2 -k gthread --threads 4 -b 127.0.0.1:8080 wsgi:app

It keeps no state between requests (its CSRF token and flash messages live in
the browser's cookies), so any number of processes can serve it.
"""
import os

from leasecron import open_store
from leasecron.contrib.dashboard import create_app

store = open_store(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))
app = create_app(store, read_only=True)  # everyone may look; nobody can pause, resume or trigger here
