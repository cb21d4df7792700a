"""Admin actions that call the services, behind a confirmation page (house rule 13).

`service_action` turns a function `(request, obj, reason) -> Outcome` — a thin call of the
same service the API calls — into a Django admin action that:

1. shows a confirmation page listing the selected objects (with a reason field where the
   service records one), like Django's own "delete selected";
2. on confirmation, calls the service once per object, each in its own transaction (one
   refused object does not undo the others), and
3. reports with `message_user`: what changed, what was left as it was and why, and any
   error the service raised.

Actions need the `operate` permission: an active staff user holding the model's change
permission in Django's auth (superusers hold every permission). A staff user with view
permission only sees the screens and no actions. Non-staff users never reach the admin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth import get_permission_codename
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from agentrun.errors import AgentRunError

CONFIRM_TEMPLATE = "admin/agentrun/confirm_action.html"


@dataclass(frozen=True)
class Outcome:
    """One object's result: `changed`, and a short sentence saying what happened."""

    changed: bool
    message: str


Perform = Callable[[HttpRequest, Any, str], Outcome]


def operator_id(request: HttpRequest) -> str:
    """Who acts, as services record it (`requested_by`, the reader of a read cursor)."""
    return f"admin:{request.user.get_username()}"


class OperatorActionsMixin:
    """Grants the `operate` permission that every `service_action` requires."""

    opts: Any

    def has_operate_permission(self, request: HttpRequest) -> bool:
        user = request.user
        codename = get_permission_codename("change", self.opts)
        return bool(
            user.is_active and user.is_staff and user.has_perm(f"{self.opts.app_label}.{codename}")
        )


def service_action(
    *, name: str, description: str, perform: Perform, reason: str | None = None
) -> Callable[..., TemplateResponse | None]:
    """An admin action named `name` that asks first, then calls `perform` per object.

    `reason`: the default text of the confirmation page's reason field; None hides the
    field (the service records no reason).
    """

    def action(
        modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
    ) -> TemplateResponse | None:
        if request.POST.get("confirmed") != "yes":
            return _confirmation(modeladmin, request, queryset, name, description, reason)
        given = (request.POST.get("reason") or "").strip() or reason or ""
        results = [_call(perform, request, obj, given) for obj in queryset]
        for result in results:
            if result.outcome is not None and result.outcome.changed:
                modeladmin.log_change(request, result.obj, f"{description}: {result.text}")
        _report(modeladmin, request, description, results)
        return None

    action.__name__ = name
    return admin.action(description=description, permissions=["operate"])(action)


@dataclass(frozen=True)
class _Result:
    obj: Model
    outcome: Outcome | None  # None: the service refused with an error
    text: str


def _call(perform: Perform, request: HttpRequest, obj: Model, reason: str) -> _Result:
    """Run one service call; a domain error is reported, not raised."""
    try:
        outcome = perform(request, obj, reason)
    except AgentRunError as error:
        return _Result(obj, None, error.message)
    return _Result(obj, outcome, outcome.message)


def _confirmation(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    name: str,
    description: str,
    reason: str | None,
) -> TemplateResponse:
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{description}: are you sure?",
        "opts": modeladmin.model._meta,
        "action_name": name,
        "description": description,
        "objects": list(queryset),
        "reason": reason,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    return TemplateResponse(request, CONFIRM_TEMPLATE, context)


def _report(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    description: str,
    results: list[_Result],
) -> None:
    """One message per kind of result: done (success), unchanged (warning), refused."""
    groups = (
        ("done", messages.SUCCESS, [r for r in results if r.outcome and r.outcome.changed]),
        (
            "unchanged",
            messages.WARNING,
            [r for r in results if r.outcome and not r.outcome.changed],
        ),
        ("refused", messages.ERROR, [r for r in results if r.outcome is None]),
    )
    for label, level, group in groups:
        if group:
            lines = "; ".join(f"{r.obj.pk}: {r.text}" for r in group)
            modeladmin.message_user(request, f"{description} — {label}: {lines}", level)
