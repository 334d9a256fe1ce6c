"""Django: ``"leasecron.contrib.django"`` in ``INSTALLED_APPS``, the ``LEASECRON`` setting,
``from leasecron.contrib.django import cron``, each app's ``cron.py``, ``manage.py leasecron``.

* :mod:`~leasecron.contrib.django.apps`: the app config; when the apps are ready, each installed
  app's ``cron`` module is imported (as the admin imports ``admin.py``), so the jobs it declares
  with ``@cron.job(...)`` are registered.
* :mod:`~leasecron.contrib.django.conf`: ``settings.LEASECRON`` (the store under ``"STORE"``, any
  LeaseCron option under its own name) and its problems.
* :mod:`~leasecron.contrib.django.checks`: those problems, and a store that does not answer, as
  system check messages (``manage.py check``).
* :mod:`~leasecron.contrib.django.project`: ``cron``, the project's
  :class:`~leasecron.LeaseCron`, built from the setting on first use; its handlers run between
  two ``close_old_connections()``.
* ``manage.py leasecron VERB``: the ``leasecron`` command's verbs on the project's store and jobs
  (:mod:`~leasecron.contrib.django.verbs`).

Like the Flask extension, nothing here starts the cron: a process that loads the project (a
management command, a shell, a web worker) runs no job until ``cron.start()`` is called, or
``manage.py leasecron run`` runs it. :doc:`The Django guide <django>` says how.
"""

from __future__ import annotations

from typing import Any

try:
    import django  # type: ignore[import-untyped]  # noqa: F401 - the dependency this package needs
except ImportError as exc:  # pragma: no cover - the test environment has Django
    raise ImportError(f"leasecron.contrib.django needs Django: pip install 'leasecron[django]' ({exc})") from exc

from .project import DjangoLeaseCron, get_cron

__all__ = ["cron", "get_cron", "DjangoLeaseCron"]

cron: DjangoLeaseCron


def __getattr__(name: str) -> Any:
    """``cron``: the project's cron (:func:`get_cron`), built from ``settings.LEASECRON`` on first use."""
    if name == "cron":
        built = get_cron()
        globals()["cron"] = built  # from now on an ordinary attribute
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
