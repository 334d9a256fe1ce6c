"""The ``LEASECRON`` setting of a Django project: what it holds, and each problem with it.

``settings.LEASECRON`` is a dict: the store under ``"STORE"`` (a store URL, or a
:class:`~leasecron.Store`), and ``runner`` and every :class:`~leasecron.LeaseCron` option
(:data:`leasecron.options.OPTIONS`) under its own lower-case name::

    LEASECRON = {"STORE": "redis://localhost:6379/0", "lease_ms": 60_000, "tz": "Europe/Paris"}

:func:`read_settings` reads it with no I/O (a store URL is parsed, not connected to) and returns
either the :class:`Settings` or every :class:`Problem` it found, each with the id of the system
check message that reports it (:data:`PROBLEM_IDS`). The checks
(:mod:`leasecron.contrib.django.checks`) report the problems; the project's cron
(:mod:`leasecron.contrib.django.project`) is built from the settings, and refuses to be built
while there is a problem.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from django.conf import settings as django_settings  # type: ignore[import-untyped]

from ...errors import ConfigError
from ...limits import check_text
from ...options import BY_NAME, OPTIONS, resolve_options
from ...stores import Store, open_store
from ...stores.urls import masked_url

__all__ = [
    "SETTING",
    "STORE_KEY",
    "OPTION_KEYS",
    "KEYS",
    "PROBLEM_IDS",
    "Problem",
    "Settings",
    "read_settings",
]

#: The name of the Django setting.
SETTING = "LEASECRON"
#: The key of the store (a URL, or a Store).
STORE_KEY = "STORE"
#: The other keys: ``runner`` and every LeaseCron option, by its own (lower-case) name.
OPTION_KEYS: Tuple[str, ...] = ("runner", *(option.name for option in OPTIONS))
#: Every key the setting takes.
KEYS: Tuple[str, ...] = (STORE_KEY, *OPTION_KEYS)
#: Where the messages point at.
WHERE = f"settings.{SETTING}"
_EXAMPLE = (
    f'{SETTING} = {{"{STORE_KEY}": "redis://localhost:6379/0"}} (or "sqlite:///leasecron.db", "postgresql://...")'
)

#: Each problem's id (a system check message's) and what it says.
PROBLEM_IDS: Dict[str, str] = {
    "leasecron.E001": f"{WHERE} is not set, or is not a dict",
    "leasecron.E002": f"{WHERE} has no {STORE_KEY}",
    "leasecron.E003": f"{WHERE}[{STORE_KEY!r}] is not a valid store URL (nor a Store)",
    "leasecron.E004": f"{WHERE} has keys leasecron does not know",
    "leasecron.E005": "an option's value is not valid",
    "leasecron.E006": "the options do not fit together (heartbeat_ms under half of lease_ms, ...)",
    "leasecron.W001": "the store does not answer (checked with a bounded wait)",
}


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem of the setting: the ``id`` of its check message, what is wrong, and a hint."""

    id: str
    message: str
    hint: Optional[str] = None

    @property
    def is_error(self) -> bool:
        """Whether it is an error (``leasecron.E...``), not a warning."""
        return ".E" in self.id


@dataclasses.dataclass(frozen=True)
class Settings:
    """A setting without problems: the ``store`` (a URL, or a Store) and the ``options`` given
    (``runner`` and LeaseCron options; ``None`` values left out: the option's default applies)."""

    store: Union[str, Store]
    options: Dict[str, Any]

    def open_store(self, create: bool = True) -> Tuple[Store, bool]:
        """The store, and whether it was opened here from the URL (then the caller closes it)."""
        if isinstance(self.store, str):
            return open_store(self.store, create=create), True
        return self.store, False

    def shown_store(self) -> str:
        """The store as a message shows it: its URL without a password, or the Store's repr."""
        return repr(masked_url(self.store)) if isinstance(self.store, str) else repr(self.store)


_FROM_DJANGO: Any = object()


def read_settings(value: Any = _FROM_DJANGO) -> Tuple[Optional[Settings], List[Problem]]:
    """``settings.LEASECRON`` (or ``value``) read and checked: ``(Settings, [])``, or ``(None,
    problems)`` with every problem found (errors only: reaching the store is the checks' part)."""
    if value is _FROM_DJANGO:
        value = getattr(django_settings, SETTING, None)
    if value is None:
        return None, [Problem("leasecron.E001", f"{WHERE} is not set", f"set it in your settings: {_EXAMPLE}")]
    if not isinstance(value, Mapping):
        return None, [Problem("leasecron.E001", f"{WHERE} must be a dict, not {type(value).__name__}", _EXAMPLE)]
    problems = _unknown_keys(value)
    problems += _store_problems(value.get(STORE_KEY))
    options = {key: item for key, item in value.items() if key in OPTION_KEYS and item is not None}
    bad_options = _option_problems(options)
    problems += bad_options or _combined_problems(options)
    if problems:
        return None, problems
    return Settings(value[STORE_KEY], options), []


def _unknown_keys(value: Mapping[Any, Any]) -> List[Problem]:
    unknown = [key for key in value if key not in KEYS]
    if not unknown:
        return []
    named = ", ".join(f"{key!r}{_nearest(key)}" for key in unknown)
    return [
        Problem(
            "leasecron.E004",
            f"{WHERE} has unknown key(s): {named}",
            f"it takes {STORE_KEY!r} and, each under its own lower-case name, runner and the LeaseCron"
            f" options: {', '.join(OPTION_KEYS)}",
        )
    ]


def _nearest(key: Any) -> str:
    if not isinstance(key, str):
        return ""
    if key.lower() in KEYS or key.upper() == STORE_KEY:
        return f" (did you mean {key.upper() if key.upper() == STORE_KEY else key.lower()!r}?)"
    close = difflib.get_close_matches(key.lower(), OPTION_KEYS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _store_problems(store: Any) -> List[Problem]:
    if store is None:
        return [Problem("leasecron.E002", f"{WHERE} has no {STORE_KEY!r}: leasecron needs a store", _EXAMPLE)]
    if isinstance(store, Store):
        return []
    if not isinstance(store, str):
        return [
            Problem(
                "leasecron.E003",
                f"{WHERE}[{STORE_KEY!r}] must be a store URL or a leasecron Store, not {type(store).__name__}",
                _EXAMPLE,
            )
        ]
    try:
        opened = open_store(store, create=False)  # parses the URL and its options; connects to nothing
    except ConfigError as exc:
        return [Problem("leasecron.E003", f"{WHERE}[{STORE_KEY!r}]: {exc}", _EXAMPLE)]
    opened.close()
    return []


def _option_problems(options: Mapping[str, Any]) -> List[Problem]:
    problems = []
    for name, value in options.items():
        try:
            if name == "runner":
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{WHERE}: runner must be a non-empty string, not {value!r}")
                check_text(f"{WHERE}: runner", value)
            else:
                BY_NAME[name].check(value, WHERE)
        except ConfigError as exc:
            hint = None
            if isinstance(value, str) and name != "runner" and BY_NAME[name].integer:
                hint = "give a number; for a value from the environment: int(os.environ[...])"
            problems.append(Problem("leasecron.E005", str(exc), hint))
    return problems


def _combined_problems(options: Mapping[str, Any]) -> List[Problem]:
    """The job options together, as every job uses them (each one alone is valid)."""
    job_options = {name: value for name, value in options.items() if name in BY_NAME and BY_NAME[name].job}
    try:
        resolve_options(job_options, {})
    except ConfigError as exc:
        text = str(exc).replace("LeaseCron: ", f"{WHERE}: ", 1).replace(", from LeaseCron", "")
        return [Problem("leasecron.E006", text)]
    return []
