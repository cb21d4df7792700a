"""Sessions, CSRF, the user and messages run for the browser pages, not for `/api/`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory

from agentrun.middleware import (
    BrowserAuthenticationMiddleware,
    BrowserCsrfViewMiddleware,
    BrowserMessageMiddleware,
    BrowserSessionMiddleware,
)

# What each Django middleware leaves on the request it handled.
MARKS = [
    (BrowserSessionMiddleware, "session"),
    (BrowserAuthenticationMiddleware, "user"),
    (BrowserMessageMiddleware, "_messages"),
]


def _handler(view: Any) -> Any:
    """Session then user then messages around `view`, as in MIDDLEWARE."""
    handler = view
    for middleware, _ in reversed(MARKS):
        handler = middleware(handler)
    return handler


def _chain(request: HttpRequest) -> HttpResponse:
    response: HttpResponse = _handler(lambda request: HttpResponse("ok"))(request)
    return response


@pytest.mark.parametrize("path", ["/admin/", "/admin/status/", "/metrics"])
def test_a_browser_path_gets_session_user_and_messages(path: str) -> None:
    request = RequestFactory().get(path)
    assert _chain(request).status_code == 200
    assert all(hasattr(request, mark) for _, mark in MARKS)


@pytest.mark.parametrize("path", ["/api/v1/runs/r1/events", "/api/schema"])
def test_an_api_path_skips_them(path: str) -> None:
    request = RequestFactory().post(path)
    response = _chain(request)
    assert response.status_code == 200 and "Set-Cookie" not in response
    assert not any(hasattr(request, mark) for _, mark in MARKS)


def test_the_skip_works_under_the_async_handler() -> None:
    async def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    handler = _handler(view)
    api, admin = RequestFactory().get("/api/v1/runs"), RequestFactory().get("/admin/")
    assert asyncio.run(handler(api)).status_code == 200
    assert asyncio.run(handler(admin)).status_code == 200
    assert not any(hasattr(api, mark) for _, mark in MARKS)
    assert all(hasattr(admin, mark) for _, mark in MARKS)


def test_csrf_is_checked_outside_api_only() -> None:
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    csrf = BrowserCsrfViewMiddleware(view)
    api, admin = RequestFactory().post("/api/v1/runs"), RequestFactory().post("/admin/login/")
    for request in (api, admin):
        request._dont_enforce_csrf_checks = False  # type: ignore[attr-defined]
    assert csrf.process_view(api, view, (), {}) is None
    refused = csrf.process_view(admin, view, (), {})
    assert refused is not None and refused.status_code == 403


@pytest.mark.django_db
def test_the_admin_login_still_refuses_a_post_without_the_csrf_token() -> None:
    client = Client(enforce_csrf_checks=True)
    page = client.get("/admin/login/", HTTP_HOST="localhost")
    assert page.status_code == 200 and "csrftoken" in page.cookies
    refused = client.post(
        "/admin/login/", {"username": "x", "password": "y"}, HTTP_HOST="localhost"
    )
    assert refused.status_code == 403
    token = page.cookies["csrftoken"].value
    answered = client.post(
        "/admin/login/",
        {"username": "x", "password": "y", "csrfmiddlewaretoken": token},
        HTTP_HOST="localhost",
    )
    assert answered.status_code == 200  # the form again, "wrong password": past the CSRF check
