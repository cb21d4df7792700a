"""Throttling of wrong credentials: guessing API keys from one address is slowed to a
trickle (issue 16: there was no limit).

A fixed window per client address in Django's cache: after MAX_KEY_FAILURES wrong keys in
a window, every request from that address that carries a key is a 429 with `Retry-After`
until the window ends, right or wrong key, so a guess cannot be confirmed meanwhile. The
default cache is per process; a deployment with several server processes configures a
shared cache (`CACHES`, e.g. Redis) to make the limit global.
"""

from __future__ import annotations

import math
import time

from django.core.cache import cache
from django.http import HttpRequest

from agentrun import errors  # the module: errors imports DRF, which imports auth

KEY_FAILURE_WINDOW_S = 60
MAX_KEY_FAILURES = 20


def _window() -> tuple[int, int]:
    """The current window's number and the whole seconds until it ends."""
    now = time.time()
    number = int(now // KEY_FAILURE_WINDOW_S)
    return number, max(1, math.ceil((number + 1) * KEY_FAILURE_WINDOW_S - now))


def _counter(request: HttpRequest, window: int) -> str:
    return f"agentrun:key-failures:{request.META.get('REMOTE_ADDR', '?')}:{window}"


def refuse_if_throttled(request: HttpRequest) -> None:
    """A 429 while the caller's address has used up its wrong keys for this window."""
    window, retry_after = _window()
    if (cache.get(_counter(request, window)) or 0) >= MAX_KEY_FAILURES:
        raise errors.throttled("too many wrong API keys from this address", retry_after=retry_after)


def record_key_failure(request: HttpRequest) -> None:
    window, _ = _window()
    counter = _counter(request, window)
    cache.add(counter, 0, timeout=KEY_FAILURE_WINDOW_S * 2)
    try:
        cache.incr(counter)
    except ValueError:  # evicted between add and incr: start again
        cache.set(counter, 1, timeout=KEY_FAILURE_WINDOW_S * 2)
