"""The admin as an operator console: every changelist and change page of every registered
model renders with data present; non-staff users are refused; view-only staff see no
actions; the big tables never count themselves in full."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.ops.world import World, build_world

pytestmark = pytest.mark.django_db(transaction=True)


def _url(model: type, view: str, *args: object) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def test_every_changelist_and_change_page_renders_with_data(staff: Client) -> None:
    world = build_world()
    for model in admin.site._registry:
        obj = model._default_manager.order_by("pk").first()
        assert obj is not None, f"no {model.__name__} row in the world"
        listed = staff.get(_url(model, "changelist"))
        assert listed.status_code == 200, model
        assert str(obj.pk).encode() in listed.content or model._meta.model_name == "user"
        page = staff.get(_url(model, "change", obj.pk))
        assert page.status_code == 200, (model, obj.pk)
    run_page = staff.get(_url(type(world.session_run), "change", world.session_run.id))
    body = run_page.content.decode()
    assert "Latest events" in body and "all events (paged)" in body
    assert f"session {world.session.session_id}" in body


def test_a_runs_events_are_paged_in_seq_order_newest_last(staff: Client) -> None:
    world = build_world()
    events = staff.get("/admin/runs/event/", {"run__id__exact": world.session_run.id})
    rows = [line for line in events.content.decode().split("<tr") if "field-seq" in line]
    seqs = [int(row.split('field-seq">')[1].split("<")[0]) for row in rows]
    assert seqs == sorted(seqs) and len(seqs) >= 3


def test_big_tables_never_run_a_full_count(staff: Client) -> None:
    build_world()
    for path in ("/admin/runs/event/", "/admin/outbox/kafkaeventoutbox/", "/admin/runs/run/"):
        with CaptureQueriesContext(connection) as queries:
            assert staff.get(path, {"q": "x"}).status_code == 200
            assert staff.get(path).status_code == 200
        counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
        assert counts and all("LIMIT" in sql.upper() for sql in counts), counts


def test_a_non_staff_user_is_refused_and_changes_nothing(
    world_client: tuple[World, Client],
) -> None:
    world, _ = world_client
    outsider = Client()
    outsider.force_login(User.objects.create_user("mallory", password="pw"))
    for path in ("/admin/", "/admin/runs/run/", "/admin/status/"):
        response = outsider.get(path)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    attempt = outsider.post(
        "/admin/runs/run/",
        {"action": "cancel_runs", "_selected_action": [world.session_run.id], "confirmed": "yes"},
    )
    assert attempt.status_code == 302
    assert type(world.session_run).objects.get(pk=world.session_run.id).status == "claimed"


def test_view_only_staff_see_the_screens_but_no_actions(world_client: tuple[World, Client]) -> None:
    world, _ = world_client
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_run"))
    client = Client()
    client.force_login(viewer)
    listed = client.get("/admin/runs/run/")
    assert listed.status_code == 200 and b"cancel_runs" not in listed.content
    refused = client.post(
        "/admin/runs/run/",
        {"action": "cancel_runs", "_selected_action": [world.session_run.id], "confirmed": "yes"},
    )
    assert type(world.session_run).objects.get(pk=world.session_run.id).status == "claimed"
    assert refused.status_code in (200, 302)


@pytest.fixture
def world_client(staff: Client) -> tuple[World, Client]:
    return build_world(), staff
