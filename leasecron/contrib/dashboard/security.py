"""The dashboard's defences: who may look, who may act, and what a page may run.

The password check (HTTP basic, any user name, compared in constant time), the CSRF double
submit of the pages' forms (a token in a cookie and in each form), the redirects that stay in
the dashboard, the headers (:data:`SECURITY_HEADERS`), who acts (``"<user>@<host>"``) and the
flash messages. The one idea: nothing is kept on the server, so any of several server processes
checks any request. ``docs/dashboard.rst`` (Security) says what each defence does.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import socket
from typing import Optional, Tuple
from urllib.parse import quote, unquote, urlsplit

from flask import Request, Response
from werkzeug.wrappers import Response as BaseResponse

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "FLASH_COOKIE",
    "REALM",
    "SECURITY_HEADERS",
    "actor",
    "challenge",
    "csrf_ok",
    "csrf_token",
    "flash_value",
    "password_ok",
    "read_flash",
    "safe_next",
    "set_cookie",
]

CSRF_COOKIE = "leasecron_csrf"
CSRF_FIELD = "csrf_token"
FLASH_COOKIE = "leasecron_flash"
REALM = "leasecron"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
#: The longest user name recorded in ``by`` (the store takes at most 200 characters in all).
MAX_USER_CHARS = 100

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';"
        " form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


def password_ok(request: Request, password: str) -> bool:
    """Whether the request carries HTTP basic credentials with ``password`` (any user name),
    compared in constant time."""
    auth = request.authorization
    if auth is None or auth.type != "basic" or auth.password is None:
        return False
    return hmac.compare_digest(_digest(auth.password), _digest(password))


def challenge() -> Response:
    """The 401 answer that asks the browser for the password."""
    response = Response("leasecron dashboard: this page needs the dashboard's password (HTTP basic"
                        " authentication, any user name)\n", status=401, mimetype="text/plain")
    response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}"'
    return response


def csrf_token(request: Request) -> Tuple[str, bool]:
    """The browser's CSRF token, and whether it is new (then the cookie must be set)."""
    token = request.cookies.get(CSRF_COOKIE, "")
    if _TOKEN.fullmatch(token):
        return token, False
    return secrets.token_urlsafe(32), True


def csrf_ok(request: Request) -> bool:
    """Whether a form's ``csrf_token`` field equals the ``leasecron_csrf`` cookie (both present)."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    field = request.form.get(CSRF_FIELD, "")
    if not cookie or not field:
        return False
    return hmac.compare_digest(cookie.encode("utf-8", "surrogateescape"), field.encode("utf-8", "surrogateescape"))


def set_cookie(response: BaseResponse, request: Request, name: str, value: str, root: str) -> None:
    """Set an HttpOnly, ``SameSite=Strict`` cookie for the dashboard's paths only (``root``);
    ``Secure`` when the request came over HTTPS. An empty ``value`` deletes it."""
    response.set_cookie(
        name,
        value,
        max_age=None if value else 0,
        path=root,
        secure=request.is_secure,
        httponly=True,
        samesite="Strict",
    )


def safe_next(target: Optional[str], root: str) -> str:
    """``target`` when it is a path of this dashboard (under ``root``), else ``root``: a form
    never redirects off the dashboard."""
    if not target or any(ch == "\\" or ord(ch) < 32 or ord(ch) == 127 for ch in target):
        return root
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or target.startswith("//") or not target.startswith(root):
        return root
    if any(segment.lower().replace("%2e", ".") in (".", "..") for segment in parts.path.split("/")):
        return root  # a browser resolves a dot segment (also written %2e): it could climb out
    return target


def actor(request: Request) -> str:
    """Who acts, for the store: ``"<basic-auth user or 'dashboard'>@<host>"``."""
    auth = request.authorization
    user = (auth.username or "") if auth is not None and auth.type == "basic" else ""
    user = "".join(ch for ch in user if ch.isprintable())[:MAX_USER_CHARS] or "dashboard"
    return f"{user}@{socket.gethostname()}"


def flash_value(message: str, error: bool = False) -> str:
    """A flash message as a cookie value: percent-encoded, cut to fit a cookie (3,000 bytes); an
    ``error`` (a change refused: nothing was stored) starts with ``!``, which percent-encoding
    never leaves in a message."""
    value = quote(message, safe="")
    while len(value) > 3000:
        message = message[: len(message) * 3 // 4] + "…"
        value = quote(message, safe="")
    return f"!{value}" if error else value


def read_flash(request: Request) -> Tuple[Optional[str], bool]:
    """The flash message the last action left for this page, if any, and whether it is an error."""
    value = request.cookies.get(FLASH_COOKIE)
    if not value:
        return None, False
    error = value.startswith("!")
    return unquote(value[1:] if error else value), error
