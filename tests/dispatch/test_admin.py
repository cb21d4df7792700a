"""Dispatch intents in Django admin: listed, searchable by id, filterable, read-only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.dispatch.helpers import intent_of, make_dispatch_command

URL = "/admin/dispatch/runnerdispatchintent/"


@pytest.mark.django_db
def test_intents_are_searchable_filterable_and_read_only(client: Client) -> None:
    intent = intent_of(make_dispatch_command())
    other = intent_of(make_dispatch_command())
    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw"))
    found = client.get(URL, {"q": intent.id})
    assert found.status_code == 200
    assert intent.id in found.content.decode() and other.id not in found.content.decode()
    assert client.get(URL, {"state__exact": "pending"}).status_code == 200
    detail = client.get(f"{URL}{intent.id}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    assert client.get(f"{URL}add/").status_code == 403
