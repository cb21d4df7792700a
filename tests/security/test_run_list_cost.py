"""`GET /runs` as a tenant with a long history uses it to slow everyone down (issue 16: at
50,000 runs the default page hit the statement timeout, and eight such calls made another
tenant wait 63 s). Every statement the list runs is bounded: EXPLAIN ANALYZE of each reads
at most a window of rows, never the tenant's history, and the search is an index scan."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.selectors import FACET_WINDOW, TOTAL_CAP
from tests.api.helpers import API
from tests.builders import key_client

pytestmark = pytest.mark.django_db

HISTORY = TOTAL_CAP + 2_000  # more than any window: a full read would show
BOUND = TOTAL_CAP + 1  # the most rows any plan node may produce (the capped count)


@pytest.fixture
def history() -> None:
    """HISTORY completed runs of tenant-a, written in one statement (as bench/cells does)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO agentrun_runs (id, tenant_id, project_id, workspace_ref, provider_id,
              backend_profile, execution_policy, status, terminal_status, created_at,
              updated_at, lease_epoch, cancel_epoch, failure_message)
            SELECT 'run_h' || lpad(i::text, 7, '0'), 'tenant-a', 'proj-' || (i %% 7),
              jsonb_build_object('path', '/w/' || (i %% 9)), 'openai', 'scripted', '{}',
              'completed', 'completed', now() - i * interval '1 s', now() - i * interval '1 s',
              1, 0, CASE WHEN i %% 500 = 3 THEN 'needle ' || i END
            FROM generate_series(1, %s) i
            """,
            [HISTORY],
        )
        cursor.execute("ANALYZE agentrun_runs")


def _plans(path: str) -> list[str]:
    client = key_client(role="client")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(f"{API}{path}")
    assert response.status_code == 200, response.content
    plans = []
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            if "agentrun_runs" not in query["sql"]:
                continue
            cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + query["sql"])
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
    return plans


def _largest_node(plan: str) -> int:
    return max(int(n) for n in re.findall(r"actual rows=(\d+)", plan))


@pytest.mark.parametrize(
    "path",
    [
        "/runs",
        "/runs?status=completed",
        "/runs?sort=status-asc",
        "/runs?sort=updated-asc",
        "/runs?search=needle",
        "/runs?search=ne",
        "/runs?project_id=proj-3",
    ],
)
def test_no_statement_of_the_run_list_reads_the_tenants_history(history: None, path: str) -> None:
    plans = _plans(path)
    assert len(plans) == 4
    for plan in plans:
        assert _largest_node(plan) <= BOUND, plan


def test_the_search_is_a_trigram_index_scan(history: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the plan the index allows
        page = _plans("/runs?search=needle")[0]
    assert "agentrun_runs_search_idx" in page


def test_the_page_reports_what_it_bounded(history: None) -> None:
    body: dict[str, Any] = key_client(role="client").get(f"{API}/runs").json()
    assert (body["total"], body["total_truncated"]) == (TOTAL_CAP, True)
    assert body["facets_truncated"] is True
    assert sum(body["facets"]["status_counts"].values()) == FACET_WINDOW
    deep = key_client(role="client").get(f"{API}/runs?page={TOTAL_CAP // 50 + 1}")
    assert deep.status_code == 400 and deep.json()["error"]["details"]["field"] == "page"
