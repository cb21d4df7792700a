"""Statements per dispatch claim and per settle, pinned (issue 18 item 1): each is a fixed
number of round trips whatever the batch size."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentrun.models import ApiKey
from agentrun.prepared_sql import GENERIC_PLANS, INDEX_PLANS
from dispatch.launchers import Launched
from dispatch.models import RunnerDispatchIntent
from dispatch.services.claims import Completion, claim_intents_with_keys, complete_intents
from runs.models import Backend, RunnerJob
from tests.dispatch.helpers import make_dispatch_command
from tests.support.psycopg_commands import psycopg_commands


def _launched(runner_id: str) -> Launched:
    return Launched(
        launcher="local", job_name=f"job-{runner_id}", namespace="local", image="img",
        manager_url="http://m", runner_id=runner_id, source_commit="abc",
    )  # fmt: skip


def _statements(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"].split()[0].upper() for query in queries.captured_queries]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("size", [1, 12])
def test_a_claim_and_its_settle_are_a_fixed_number_of_statements(size: int) -> None:
    Backend.objects.filter(profile="scripted").update(capacity={})
    for _ in range(size):
        make_dispatch_command()
    with psycopg_commands() as claim_sent, CaptureQueriesContext(connection) as claim:
        keyed = claim_intents_with_keys(owner="w", lease_ms=60_000, limit=size)
    # The claim UPDATE and the keys' INSERT in one statement, sent with its transaction's
    # BEGIN and COMMIT (and its plan settings) in one string: one round trip and one
    # commit before a launch. Django logs its block's BEGIN and COMMIT; psycopg sends
    # neither (the prepared statements: tests/dispatch/test_dispatch_prepared.py).
    assert _statements(claim) == ["BEGIN", "BEGIN;", "COMMIT"], claim.captured_queries
    assert claim_sent == []
    assert "WITH due AS" in claim.captured_queries[1]["sql"]
    assert ApiKey.objects.filter(run_id__in=[c.run_id for c, _ in keyed]).count() == size
    completions = [Completion(claim, _launched(claim.runner_id)) for claim, _ in keyed]
    with psycopg_commands() as sent, CaptureQueriesContext(connection) as settle:
        outcome = complete_intents(completions=completions)
    assert len(outcome.completed) == size
    # Three round trips: the BEGIN, the locks (every run, then every command) and after
    # them the jobs + intents write (`dispatch.sql`: the intents' lock is its
    # compare-and-set, no SELECT of their own since issue 18), four statements in one
    # string (`runs.locks.lock_runs_and_commands`, `agentrun.prepared_sql.execute_hot_sets`); the
    # events' append (no webhook endpoint here, so no delivery INSERT); the COMMIT and,
    # after it, the runs' NOTIFY in one string (`runs.services.event_log.commit_appends`).
    # Django logs the BEGIN of its block and its own COMMIT, neither of which psycopg
    # sends. Until issue 18's seventh round they were seven: the BEGIN, the locks and the
    # write a round trip each, the NOTIFY one after the COMMIT; until its eighth, four
    # (the BEGIN psycopg's own).
    sqls = [query["sql"] for query in settle.captured_queries]
    assert _statements(settle) == ["BEGIN", "BEGIN;", "WITH", "COMMIT;", "COMMIT"], sqls
    # The BEGIN, the transaction's plan settings (the statements are prepared from a
    # connection's second settle on: tests/dispatch/test_dispatch_prepared.py), the locks.
    head = f"BEGIN;\n{INDEX_PLANS}{GENERIC_PLANS}"
    assert sqls[1].startswith(head), sqls[1]
    locks = sqls[1].removeprefix(head).split(";\n")
    assert len(locks) == 3, locks
    assert locks[0].startswith("SELECT") and 'FROM "agentrun_runs"' in locks[0]
    assert locks[1].startswith("SELECT") and "FROM agentrun_commands" in locks[1]
    assert (
        locks[2].startswith("WITH j AS") and "UPDATE agentrun_runner_dispatch_intents" in locks[2]
    )
    assert sqls[2].startswith("WITH base")  # the events' append
    assert sqls[3].startswith("COMMIT;\n")  # the NOTIFY's statement, as is or prepared:
    assert "pg_notify" in sqls[3] or sqls[3].startswith("COMMIT;\nEXECUTE run_change_notify_")
    assert sent == []  # psycopg sent no BEGIN nor COMMIT of its own
    assert RunnerJob.objects.count() == size
    dispatched = RunnerDispatchIntent.objects.filter(state="dispatched")
    assert sorted(dispatched.values_list("actual_runner_job_id", flat=True)) == sorted(
        RunnerJob.objects.values_list("id", flat=True)
    )
