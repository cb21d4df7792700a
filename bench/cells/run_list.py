"""Cell 11: run list. `GET /runs` latency for a tenant with 5k runs vs one with 50k.

Issue 16: at 50,000 runs the default page computed facets over the whole history and the
search scanned it, until the statement timeout. Two tenants of one database, `small`
(5k completed runs) and `large` (10x; quick: 1k and 10k), written in one statement each.
Each sample is the p50 of in-process `GET /runs` calls through the API (auth, filters,
selector, serializer) on the default page, a search and a status filter in turn. Ratio =
large p50 / small p50; the goal is <= 1.5. The EXPLAIN of each statement of the large
tenant's default page goes to the cell's data (no node reads the history).
"""

from __future__ import annotations

import time
from typing import Any

from bench import env
from bench.harness import CellReport, Figure, Ledger, Sample, Scale, compare

PATHS = ["/api/v1/runs", "/api/v1/runs?search=needle", "/api/v1/runs?status=completed"]


def _write_history(tenant: str, runs: int) -> None:
    with env.admin_connect() as conn:
        conn.execute(
            """
            INSERT INTO agentrun_runs (id, tenant_id, project_id, workspace_ref, provider_id,
              backend_profile, execution_policy, status, terminal_status, created_at,
              updated_at, lease_epoch, cancel_epoch, failure_message)
            SELECT 'run_' || %s || lpad(i::text, 9, '0'), %s, 'proj-' || (i %% 20),
              jsonb_build_object('path', '/work/repo-' || (i %% 50)), 'openai', 'scripted',
              '{}', 'completed', 'completed', now() - i * interval '1 s',
              now() - i * interval '1 s', 1, 0,
              CASE WHEN i %% 1000 = 7 THEN 'needle failure ' || i END
            FROM generate_series(1, %s::int) i
            """,
            [tenant, tenant, runs],
        )


def _sample(client: Any, calls: int) -> Sample:
    latencies = []
    began = time.perf_counter()
    for index in range(calls):
        start = time.perf_counter()
        response = client.get(PATHS[index % len(PATHS)])
        latencies.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.content[:300]
    return Sample(calls, time.perf_counter() - began, Ledger(calls, calls), latencies)


def _plans(client: Any) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(PATHS[0])
    plans = []
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            if "agentrun_runs" in query["sql"]:
                cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + query["sql"])
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
    return plans


def run(scale: Scale) -> CellReport:
    from tests.builders import key_client

    small, calls = scale.pick(1_000, 5_000), scale.pick(30, 150)
    _write_history("small", small)
    _write_history("large", small * 10)
    env.vacuum_analyze()
    clients = {t: key_client(role="client", tenant_id=t) for t in ("small", "large")}
    for client in clients.values():
        _sample(client, len(PATHS))  # warm caches and connections
    report = CellReport()
    report.outcomes.append(
        compare(
            Figure(
                key="run_list_growth",
                title="GET /runs p50, 10x the tenant's history",
                a_name=f"{small} runs",
                a=lambda: _sample(clients["small"], calls),
                b_name=f"{small * 10} runs",
                b=lambda: _sample(clients["large"], calls),
                params={"small": small, "large": small * 10, "calls": calls},
                metric="p50",
                unit="ms",
                goal=("<=", 1.5),
                reference_kind="self",
            ),
            repetitions=scale.pick(1, 3),
        )
    )
    report.data["large_default_page_plans"] = _plans(clients["large"])
    report.note("ratio = large p50 / small p50; EXPLAIN of the large default page in data")
    return report
