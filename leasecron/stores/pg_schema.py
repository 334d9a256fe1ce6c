"""The PostgreSQL store's schema: created or migrated once, or found as it is.

A :class:`~leasecron.stores.postgres.PostgresStore` that creates (the default) creates the schema
and its tables on its first operation, or migrates them to this release's version
(:mod:`leasecron.stores.migrations`), under an advisory lock, in one transaction, so that
instances starting together migrate once. One that does not create (``create=False``, the
commands that only read) checks that the schema and the tables exist and are not newer than this
release, and reads an older version as it is: :attr:`PgSchema.version` says which it found.
"""

from __future__ import annotations

import threading
from typing import Dict

from ..errors import ConfigError, StoreError
from .migrations import check_version, latest_version, migrate
from .pg_connections import Cursor

__all__ = ["PgSchema", "SCHEMA_VERSION"]

#: The schema version this release writes and reads: the number of its last migration. 2: the
#: claim function takes the retry of a claim that won (same token and runner) as that attempt again.
#: 3: pauses, requests for manual runs, and the attempts of every run. 4: stored schedules, and the
#: claim answers a new claim from an older schedule version stale (rule 23). 5: the instances'
#: announcements. 6: the claim answers a run that ended or holds a live lease from one read, before
#: it takes the job's lock. 7: the record of a handler's return on its attempt (rule 26).
SCHEMA_VERSION = latest_version("postgres")


class PgSchema:
    """The schema ``schema``.``table`` of one store, by the named queries ``q``."""

    def __init__(self, q: Dict[str, str], schema: str, table: str) -> None:
        self._q, self._schema, self._table = q, schema, table
        self._lock = threading.Lock()
        #: Created or migrated (or found current) by a store that creates.
        self.ready = False
        #: Found by a store that does not create.
        self.found = False
        #: The version of the schema found (``create=False``); this release's otherwise.
        self.version = SCHEMA_VERSION

    def ensure(self, cur: Cursor, create: bool) -> None:
        """Create or migrate the schema (``create``), or find it; once."""
        with self._lock:
            if self.ready or (self.found and not create):
                return
            q = self._q
            cur.execute(q["reserved_words"], {"names": [self._schema, self._table]})
            reserved = [row[0] for row in cur.fetchall()]
            if reserved:
                raise ConfigError(
                    f"{', '.join(map(repr, reserved))} is a reserved word in PostgreSQL:"
                    " choose another schema or table name"
                )
            if not create:
                self._find(cur)
                self.found = True
                return
            cur.execute("BEGIN")
            try:
                cur.execute(q["lock_schema"], {"name": f"leasecron:{self._schema}.{self._table}"})
                cur.execute(q["schema_exists"], {"schema": self._schema})
                if cur.fetchone() is None:
                    cur.execute(q["create_schema"])
                cur.execute(q["create_meta"])
                version = self._stamped(cur)
                if migrate("postgres", version, cur.execute, schema=self._schema, table=self._table) > version:
                    cur.execute(q["set_version"], {"version": str(SCHEMA_VERSION)})
                cur.execute("COMMIT")
            except BaseException:
                if not cur.connection.closed:
                    cur.execute("ROLLBACK")
                raise
            self.ready = True

    def _find(self, cur: Cursor) -> None:
        """What ``create=False`` does instead of creating: check that the schema and the tables
        exist and are not newer than this release, and change nothing."""
        missing = "does not exist (a store with create=False creates nothing)"
        cur.execute(self._q["schema_exists"], {"schema": self._schema})
        if cur.fetchone() is None:
            raise StoreError(f"PostgreSQL schema {self._schema!r} {missing}")
        names = [self._table, f"{self._table}_jobs", f"{self._table}_meta"]
        cur.execute(self._q["tables_found"], {"schema": self._schema, "names": names})
        found = {row[0] for row in cur.fetchall()}
        for name in names:
            if name not in found:
                raise StoreError(f"PostgreSQL table {self._schema}.{name} {missing}")
        self.version = self._stamped(cur)

    def _stamped(self, cur: Cursor) -> int:
        """The schema version stamped in ``<table>_meta`` (0: none yet); StoreError if it is newer
        than this release's."""
        cur.execute(self._q["get_version"])
        row = cur.fetchone()
        where = f"PostgreSQL table {self._schema}.{self._table}"
        return check_version("postgres", int(row[0]) if row else 0, where)
