"""What each run of the test project's job or task leaves in the database."""

from django.db import models


class Tick(models.Model):
    """One run: its job and slot, the database connection it used (``backend``: PostgreSQL's
    backend pid, or the id of SQLite's connection object), and whether the thread already held
    an open connection when the handler began."""

    job = models.CharField(max_length=200)
    slot_ms = models.BigIntegerField()
    backend = models.BigIntegerField()
    was_open = models.BooleanField()
    thread = models.BigIntegerField()
    note = models.CharField(max_length=200, default="")
