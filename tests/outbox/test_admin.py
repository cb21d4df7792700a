"""The outbox admin: a read-only operator view, filterable by derived state."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from outbox.models import KafkaEventOutbox
from tests.outbox.builders import append_logs, claimed_run

URL = "/admin/outbox/kafkaeventoutbox/"


@pytest.mark.django_db
def test_operators_can_search_and_filter_records_but_not_change_them(outbox_topic: str) -> None:
    append_logs(claimed_run(), 3)
    record = KafkaEventOutbox.objects.order_by("outbox_seq").last()
    assert record is not None
    admin = Client()
    admin.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    for state in ("", "pending", "leased", "retrying", "delivered"):
        assert admin.get(URL, {"state": state} if state else {}).status_code == 200
    found = admin.get(URL, {"q": record.event_id})
    assert found.status_code == 200 and record.id in found.content.decode()
    assert admin.get(f"{URL}{record.id}/change/").status_code == 200  # the read-only view
    assert admin.get(f"{URL}add/").status_code == 403
    assert admin.post(f"{URL}{record.id}/delete/").status_code == 403
