"""The query options of a store URL, read and changed."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def url_options(url: str) -> dict:
    """The query options of a store URL."""
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def with_option(url: str, key: str, value: str) -> str:
    """``url`` with the query option ``key=value`` added."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + [(key, value)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def replace_option(url: str, key: str, value: str) -> str:
    """``url`` with its query option ``key`` set to ``value`` (any earlier ``key`` dropped)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != key]
    return urlunsplit(parts._replace(query=urlencode(query + [(key, value)])))


def without_option(url: str, key: str) -> str:
    """``url`` without its query option ``key``."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != key]
    return urlunsplit(parts._replace(query=urlencode(query)))
