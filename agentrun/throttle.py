"""Throttling of wrong credentials: guessing API keys or admin passwords from one address
is slowed to a trickle (issue 16: there was no limit).

A fixed window per client address in Django's cache: after MAX_KEY_FAILURES wrong keys in
a window, every request from that address that carries a key is a 429 with `Retry-After`
until the window ends, right or wrong key, so a guess cannot be confirmed meanwhile. The
default cache is per process; a deployment with several server processes configures a
shared cache (`CACHES`, e.g. Redis) to make the limit global.

Admin logins go through `ThrottledModelBackend` (settings `AUTHENTICATION_BACKENDS`): past
the limit, a login from that address fails (the admin form's usual error) until the
window ends, the right password included.
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

from agentrun import errors  # the module: errors imports DRF, which imports auth

KEY_FAILURE_WINDOW_S = 60
MAX_KEY_FAILURES = 20


def _window() -> tuple[int, int]:
    """The current window's number and the whole seconds until it ends."""
    now = time.time()
    number = int(now // KEY_FAILURE_WINDOW_S)
    return number, max(1, math.ceil((number + 1) * KEY_FAILURE_WINDOW_S - now))


def _counter(request: HttpRequest | None, window: int, kind: str) -> str:
    address = request.META.get("REMOTE_ADDR", "?") if request is not None else "?"
    return f"agentrun:{kind}-failures:{address}:{window}"


def _over_limit(request: HttpRequest | None, kind: str) -> int | None:
    """Seconds until the window ends when `request`'s address is over the limit, or None."""
    window, retry_after = _window()
    over = (cache.get(_counter(request, window, kind)) or 0) >= MAX_KEY_FAILURES
    return retry_after if over else None


def refuse_if_throttled(request: HttpRequest) -> None:
    """A 429 while the caller's address has used up its wrong keys for this window."""
    retry_after = _over_limit(request, "key")
    if retry_after is not None:
        raise errors.throttled("too many wrong API keys from this address", retry_after=retry_after)


def record_key_failure(request: HttpRequest | None, kind: str = "key") -> None:
    window, _ = _window()
    counter = _counter(request, window, kind)
    cache.add(counter, 0, timeout=KEY_FAILURE_WINDOW_S * 2)
    try:
        cache.incr(counter)
    except ValueError:  # evicted between add and incr: start again
        cache.set(counter, 1, timeout=KEY_FAILURE_WINDOW_S * 2)


class ThrottledModelBackend(ModelBackend):
    """Django's password check, refused for an address past the limit of failed logins."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if _over_limit(request, "login") is not None:
            return None
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            record_key_failure(request, kind="login")
        return user


def admin_login(request: HttpRequest) -> HttpResponse:
    """The admin's login page, answering 429 with `Retry-After` to a login attempt from an
    address past the limit of failed logins (the backend above refuses it anyway; the
    status tells a person, and a guesser, to stop rather than to keep guessing)."""
    from django.contrib import admin  # the admin site is configured once apps are ready

    retry_after = _over_limit(request, "login") if request.method == "POST" else None
    if retry_after is not None:
        return HttpResponse(
            "Too many failed logins from this address; try again later.\n",
            status=429,
            content_type="text/plain",
            headers={"Retry-After": str(retry_after)},
        )
    return admin.site.login(request)
