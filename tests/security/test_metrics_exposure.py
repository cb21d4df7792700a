"""`/metrics` as anyone on the network uses it: with `AGENTRUN_METRICS_TOKEN` set, no
token or a wrong one is a 401; and scraping as fast as one can does not make the server
query the backlogs per scrape (they are read at most every refresh interval)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings as SettingsWrapper

from ops import metrics

pytestmark = pytest.mark.django_db


def test_with_a_token_set_metrics_need_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRUN_METRICS_TOKEN", "scrape-token-1")
    assert Client().get("/metrics").status_code == 401
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401 and "agentrun_" not in wrong.content.decode()
    right = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-1")
    assert right.status_code == 200 and "agentrun_outbox_backlog" in right.content.decode()


def test_without_a_token_metrics_stay_open() -> None:
    assert Client().get("/metrics").status_code == 200


def test_repeated_scrapes_do_not_query_the_database(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.AGENTRUN_METRICS_BACKLOG_REFRESH_S = 60
    monkeypatch.setattr(metrics, "BACKLOG", metrics._BacklogReading())  # this process's first
    with CaptureQueriesContext(connection) as first:
        assert Client().get("/metrics").status_code == 200
    assert len(first.captured_queries) > 0  # the first scrape of a process reads once
    with CaptureQueriesContext(connection) as later:
        for _ in range(20):
            body = Client().get("/metrics").content.decode()
    assert later.captured_queries == [] and "agentrun_outbox_backlog" in body
