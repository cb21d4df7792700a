"""The sessions admin: a read-only, searchable, filterable operator view."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client

from sessions.models import Session, SessionReadCursor
from tests.sessions.helpers import admit
from tests.sessions.world import idle_session

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/agent_sessions/session/"


def test_the_changelist_searches_by_id_and_active_run_and_filters_by_state(
    admin_client: Client,
) -> None:
    idle_session("s-admin-idle")
    turn = admit("s-admin-running", "go")
    listed = admin_client.get(CHANGELIST)
    assert listed.status_code == 200
    assert b"s-admin-idle" in listed.content and b"s-admin-running" in listed.content
    by_run = admin_client.get(CHANGELIST, {"q": turn.run.id})
    assert b"s-admin-running" in by_run.content and b"s-admin-idle" not in by_run.content
    running = admin_client.get(CHANGELIST, {"execution_state__exact": "running"})
    assert b"s-admin-running" in running.content and b"s-admin-idle" not in running.content
    by_storage = admin_client.get(CHANGELIST, {"storage_kind__exact": "none"})
    assert by_storage.status_code == 200


def test_a_session_can_be_viewed_but_not_added_changed_or_deleted(admin_client: Client) -> None:
    idle_session("s-admin-ro")
    view = admin_client.get(f"{CHANGELIST}s-admin-ro/change/")
    assert view.status_code == 200 and b"s-admin-ro" in view.content
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    assert admin_client.post(f"{CHANGELIST}s-admin-ro/delete/", {"post": "yes"}).status_code == 403
    assert Session.objects.filter(pk="s-admin-ro").exists()


def test_read_cursors_are_not_in_the_admin() -> None:
    assert admin.site.is_registered(Session)
    assert not admin.site.is_registered(SessionReadCursor)
