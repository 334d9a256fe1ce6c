"""Store URLs in messages: every password masked.

A store URL (or a libpq ``key=value`` DSN) may hold a password in its user part, in a
``password`` or ``sslpassword`` query parameter and, in a DSN, as ``password=``.
:func:`masked_url` replaces each with ``***``, and every message, log line and ``repr`` that
shows a store URL shows it through that function; :func:`without_secrets` removes the same
passwords from another text, such as a driver's error message quoting the URL. The one idea: a
URL that cannot be read as written is masked too much rather than too little.
"""

from __future__ import annotations

import re
from typing import List, Set, Tuple
from urllib.parse import unquote

__all__ = ["MASK", "masked_url", "without_secrets"]

#: What a password is replaced with.
MASK = "***"

#: A URL's scheme and ``//``.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: A password between ``:`` and ``@`` in a text that is no URL (``redis:/user:secret@host``).
_LOOSE_USER_SECRET = re.compile(r":([^\s:@/]+)@")
#: A URL's query parameter whose name holds ``password`` (``password``, ``sslpassword``): its value.
_QUERY_SECRET = re.compile(r"(?i)[?&;][^=&;#?]*password[^=&;#?]*=([^&;#]*)")
#: A libpq ``key=value`` DSN's password keyword: its value, quoted (with backslash escapes) or not.
_KEYWORD_SECRET = re.compile(r"(?i)\b\w*password\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s']*)")


def _secret_spans(url: str) -> List[Tuple[int, int]]:
    """Where the passwords of ``url`` are, as (start, end) indexes, in order."""
    scheme = _SCHEME.match(url)
    if scheme is None:  # a libpq DSN of key=value pairs, or a URL without its //
        spans = [m.span(1) for m in _LOOSE_USER_SECRET.finditer(url)]
        spans += [m.span(1) for m in _KEYWORD_SECRET.finditer(url) if m.group(1)]
        return sorted(spans)
    start = scheme.end()
    spans = []
    netloc_end = next((i for i in range(start, len(url)) if url[i] in "/?#"), len(url))
    at = url.rfind("@", start, netloc_end)
    if at < 0:
        at = url.rfind("@", start)  # a password with an unescaped / ? or #: up to the URL's last @
    colon = url.find(":", start, at) if at >= 0 else -1
    if colon >= 0 and not any(c in "/?#" for c in url[start:colon]):
        spans.append((colon + 1, at))
    spans += [m.span(1) for m in _QUERY_SECRET.finditer(url, max(at, start)) if m.group(1)]
    return spans


def masked_url(url: str) -> str:
    """``url`` with every password it holds replaced by ``***``, for messages, logs and ``repr``.

    ``redis://user:***@host:6379/0``, ``postgresql://db/app?password=***``,
    ``host=db password=*** dbname=app``. A password with a character a URL must escape (``/``,
    ``?``, ``#``) is read as far as the URL's last ``@``.
    """
    parts, end = [], 0
    for start, stop in _secret_spans(url):
        parts += [url[end:start], MASK]
        end = stop
    return "".join(parts) + url[end:]


def without_secrets(text: str, url: str) -> str:
    """``text`` with every password of ``url`` replaced by ``***``, as written in the URL and decoded.

    For a driver's error message about ``url``, which may quote part of it (libpq: ``invalid
    percent-encoded token: "secret%zz"``).
    """
    secrets: Set[str] = set()
    for start, stop in _secret_spans(url):
        raw = url[start:stop]
        for form in (raw, unquote(raw), raw[1:].rstrip("'") if raw.startswith("'") else ""):  # quoted in a DSN
            # in pieces too: a URL read wrongly (an unescaped / ? or #) splits its password there
            secrets.update(piece for piece in (form, *re.split(r"[/?#]", form)) if piece)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
