"""A dispatch batch's statements run prepared (issue 18, ninth round): the claim with keys,
the settle's locks and write, and its events statement are sent as they are on a
connection's first batch, PREPAREd on its second and EXECUTEd from its third, each with a
generic plan made with index lookups only (`agentrun.prepared_sql`'s `GENERIC_PLANS` and
`INDEX_PLANS`), made again every `REPLAN_AFTER` runs. Planning them on every batch was a
quarter of the server's time per dispatched item; a generic plan made while the tables
were small, and kept, was a scan of every event, or of every open intent, per batch later
(bench cells 3 and 6)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentrun import prepared_sql
from agentrun.auth import mint_key
from agentrun.models import ApiKey, ApiKeyRole
from agentrun.prepared_sql import GENERIC_PLANS, INDEX_PLANS
from dispatch.launchers import Launched
from dispatch.locks import claim_due_intents_with_keys
from dispatch.models import RunnerDispatchIntent
from dispatch.services.claims import Completion, claim_intents_with_keys, complete_intents
from runs.models import Backend, Event
from tests.dispatch.helpers import make_dispatch_command
from tests.support.psycopg_commands import psycopg_commands

pytestmark = pytest.mark.django_db(transaction=True)

SIZE = 3


def _launched(runner_id: str) -> Launched:
    return Launched(
        launcher="local", job_name=f"job-{runner_id}", namespace="local", image="img",
        manager_url="http://m", runner_id=runner_id, source_commit="abc",
    )  # fmt: skip


def _batch() -> tuple[list[str], list[str], list[bytes]]:
    """Claim and settle SIZE new intents: what Django logged of the claim and of the
    settle, and what psycopg sent on its own."""
    for _ in range(SIZE):
        make_dispatch_command()
    with psycopg_commands() as sent, CaptureQueriesContext(connection) as claim:
        keyed = claim_intents_with_keys(owner="w", lease_ms=60_000, limit=SIZE)
        assert len(keyed) == SIZE
        completions = [Completion(claim, _launched(claim.runner_id)) for claim, _ in keyed]
        with CaptureQueriesContext(connection) as settle:
            assert len(complete_intents(completions=completions).completed) == SIZE
    claimed = [query["sql"] for query in claim.captured_queries]
    return claimed[: len(claimed) - len(settle.captured_queries)], _sqls(settle), sent


def _sqls(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in captured.captured_queries]


@pytest.fixture(autouse=True)
def _unlimited() -> None:
    Backend.objects.filter(profile="scripted").update(capacity={})


def test_a_batch_is_prepared_on_its_second_use_and_executed_from_its_third() -> None:
    connection.close()  # a new connection: nothing prepared on it yet
    (claim1, settle1, sent1), (claim2, settle2, sent2), (claim3, settle3, sent3) = (
        _batch(),
        _batch(),
        _batch(),
    )
    assert sent1 == sent2 == sent3 == []  # every BEGIN and COMMIT is in a statement's string
    for claim in (claim1, claim2, claim3):
        # Django logs its block's BEGIN and COMMIT; the one string is the transaction.
        assert len(claim) == 3 and claim[0] == "BEGIN" and claim[2] == "COMMIT", claim
        assert claim[1].startswith(f"BEGIN;\n{INDEX_PLANS}{GENERIC_PLANS}")
        assert claim[1].endswith(";\nCOMMIT")
    assert "WITH due AS" in claim1[1] and "PREPARE" not in claim1[1]
    assert "\nPREPARE claim_with_keys_" in claim2[1] and "\nEXECUTE claim_with_keys_" in claim2[1]
    assert "\nEXECUTE claim_with_keys_" in claim3[1] and "WITH due AS" not in claim3[1]
    for settle in (settle1, settle2, settle3):
        assert len(settle) == 5, settle  # BEGIN (logged), locks + write, events, COMMIT, COMMIT
    locks1, locks2, locks3 = settle1[1], settle2[1], settle3[1]
    assert "PREPARE" not in locks1 and "EXECUTE" not in locks1
    for name in ("lock_runs_", "lock_command_states_", "record_dispatched_"):
        assert f"\nPREPARE {name}" in locks2 and f"\nEXECUTE {name}" in locks2
        assert f"\nEXECUTE {name}" in locks3
    assert "SELECT" not in locks3 and "UPDATE" not in locks3
    assert settle1[2].startswith("WITH base")
    assert "\nPREPARE append_events_" in settle2[2]
    assert "\nEXECUTE append_events_" in settle3[2] and "WITH base" not in settle3[2]
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, generic_plans, custom_plans FROM pg_prepared_statements")
        plans = {name.rsplit("_", 1)[0]: (generic, custom) for name, generic, custom in cursor}
    for name in ("claim_with_keys", "lock_runs", "lock_command_states", "record_dispatched"):
        assert plans[name] == (2, 0), (name, plans)  # planned once, generic, used twice
    assert plans["append_events"] == (2, 0), plans
    assert RunnerDispatchIntent.objects.filter(state="dispatched").count() == 3 * SIZE
    assert Event.objects.filter(payload__phase="runner-dispatched").count() == 3 * SIZE


# An argument of each type the statements take, for an EXPLAIN (nothing is run).
_ARGUMENT = {
    "jsonb": "'[]'",
    "text[]": "'{}'",
    "timestamp with time zone": "now()",
    "text": "''",
    "integer": "0",
    "numeric": "0",
    "double precision": "0",
    "bigint": "0",
}


def _generic_plan(name: str, arguments: str | None = None) -> str:
    """The plan this connection keeps for its prepared statement `<name>_…`."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, parameter_types::text[] FROM pg_prepared_statements WHERE name LIKE %s",
            [f"{name}_%"],
        )
        full, types = cursor.fetchone()
        arguments = arguments or ", ".join(_ARGUMENT[kind] for kind in types)
        # Forced for the EXPLAIN too, so it shows the cached generic plan, not a new one.
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"EXPLAIN EXECUTE {full}" + (f"({arguments})" if arguments else ""))
        return "\n".join(row[0] for row in cursor.fetchall())


def test_plans_made_while_the_tables_are_small_still_use_the_indexes() -> None:
    # A handful of rows, one page each: a plan priced as usual scans them sequentially,
    # and keeps doing so once the tables have grown.
    connection.close()
    _batch()
    _batch()
    run_id = RunnerDispatchIntent.objects.values_list("run_id", flat=True).first()
    locks = _generic_plan("lock_runs", f"'{{{run_id}}}'")
    assert "agentrun_runs_pkey" in locks and "Seq Scan" not in locks, locks
    events = _generic_plan("append_events")
    assert "Seq Scan on agentrun_events" not in events, events
    assert "agentrun_events_run_seq_key" in events, events
    # The claim's UPDATE finds each intent, run and command by its key (a nested loop over
    # the index), not by hashing a scan of the whole table.
    plan = _generic_plan("claim_with_keys")
    assert "Seq Scan" not in plan and "Hash Join" not in plan, plan
    assert "Merge Join" not in plan and "Bitmap" not in plan, plan
    assert "Index Scan using agentrun_runner_dispatch_intents_pkey" in plan, plan
    # Due intents in order from the index of waiting ones only; the rescue's expired leases
    # from the index of claimed ones (dispatch 0006): neither walks the other's rows.
    assert "agentrun_rdi_due_idx" in plan and "agentrun_rdi_lease_idx" not in plan, plan
    settle = _generic_plan("record_dispatched")
    assert "agentrun_runner_dispatch_intents_pkey" in settle, settle
    assert "agentrun_rdi_lease_idx" not in settle and "Seq Scan" not in settle, settle
    assert "agentrun_rdi_run_state_idx" not in settle, settle
    rescue = _generic_plan("rescue_expired")
    assert "agentrun_rdi_lease_idx" in rescue and "Seq Scan" not in rescue, rescue


def test_a_claim_that_fails_after_its_begin_leaves_nothing_claimed_and_the_next_works() -> None:
    connection.close()
    _batch()
    _batch()  # the claim is prepared on this connection
    make_dispatch_command()
    taken = mint_key(ApiKeyRole.RUNNER.value)
    ApiKey.objects.create(
        id=taken.id, name="taken", tenant_id="t", role=ApiKeyRole.CLIENT.value,
        key_prefix=taken.key_prefix, key_digest=taken.key_digest,
    )  # fmt: skip
    with pytest.raises(IntegrityError):  # its key's id is taken: the INSERT fails
        claim_due_intents_with_keys(
            owner="w", lease_ms=60_000, keys=[taken], expires_at=timezone.now()
        )
    assert not connection.in_atomic_block
    pending = RunnerDispatchIntent.objects.get(state="pending")  # rolled back: still due
    assert pending.attempt_count == 0 and not ApiKey.objects.filter(run_id=pending.run_id)
    keyed = claim_intents_with_keys(owner="w", lease_ms=60_000, limit=SIZE)
    assert [claim.id for claim, _ in keyed] == [pending.id]


def test_the_settles_write_is_planned_again_after_replan_after_runs() -> None:
    connection.close()
    _batch()  # as is
    _batch()  # prepared: its plan made for these few rows
    sent = [_batch() for _ in range(prepared_sql.REPLAN_AFTER)]
    *on_one_plan, again = [settle[1] for _, settle, _ in sent]
    assert all("DEALLOCATE" not in text and "PREPARE" not in text for text in on_one_plan)
    assert "\nDEALLOCATE record_dispatched_" in again and "\nPREPARE record_dispatched_" in again
    for name in ("lock_runs_", "lock_command_states_"):  # the same plan at any size: kept
        assert name in again and f"PREPARE {name}" not in again, again
    assert all("DEALLOCATE" not in claim[1] for claim, _, _ in sent)  # nor the claim's
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans FROM pg_prepared_statements WHERE name LIKE 'record_dispatched_%'"
        )
        assert cursor.fetchone()[0] == 1  # the new plan, used once


# Thousands of due intents in one statement (as `bench.queues.seed_intents`): a run, its
# turn and its intent each.
_MANY_DUE = """
WITH g AS (SELECT i, %(tag)s || lpad(i::text, 6, '0') AS k FROM generate_series(1, %(n)s) i),
runs AS (
  INSERT INTO agentrun_runs (id, tenant_id, project_id, workspace_ref, provider_id,
    backend_profile, execution_policy, status, created_at, updated_at, lease_epoch, cancel_epoch)
  SELECT 'run_m' || k, 't', 'p', '{}', 'openai', 'scripted', '{}', 'pending', now(), now(), 0, 0
  FROM g RETURNING id
), cmds AS (
  INSERT INTO agentrun_commands (id, run_id, seq, type, payload, payload_hash, state,
    created_at, updated_at, cancel_epoch)
  SELECT 'cmd_m' || k, 'run_m' || k, 1, 'turn', '{}', 'sha256:m', 'pending', now(), now(), 0
  FROM g RETURNING id
)
INSERT INTO agentrun_runner_dispatch_intents (id, run_id, command_id, kind, input, input_hash,
  state, attempt_count, runner_job_id, next_attempt_at, created_at, updated_at)
SELECT 'rdi_m' || k, 'run_m' || k, 'cmd_m' || k, 'runner-job', '{}', 'sha256:m', %(state)s, 0,
  'rjob_m' || k, now(), now() + i * interval '1 microsecond', now()
FROM g
"""


def test_a_claim_planned_on_stale_statistics_still_walks_the_due_index_in_order() -> None:
    """Statistics taken when every intent was dispatched, then thousands queued (a server
    without autovacuum): the claim's plan walks the due index in order, stopped after
    `limit` rows locked, with no bitmap and no sort. In the bench's 16-thread drain a
    claim planned on such statistics read every due intent through a bitmap and sorted
    them for each batch of ten (2,810 rows, 112 ms a claim); `INDEX_PLANS` now keeps
    bitmaps out. This test pins the plan's shape; it did not reproduce that plan on the
    tables here, the bench did (bench/README.md, tenth round)."""
    with connection.cursor() as cursor:
        cursor.execute(_MANY_DUE, {"n": 5000, "tag": "a", "state": "dispatched"})
        for table in ("agentrun_runner_dispatch_intents", "agentrun_commands", "agentrun_runs"):
            cursor.execute(f"ANALYZE {table}")
        cursor.execute(_MANY_DUE, {"n": 5000, "tag": "b", "state": "pending"})
    connection.close()
    for _ in range(2):  # planned and prepared at the second
        claim_intents_with_keys(owner="w", lease_ms=60_000, limit=SIZE)
    plan = _generic_plan("claim_with_keys")
    due = plan[plan.index("CTE due") : plan.index("CTE claimed")]
    assert "Bitmap" not in due and "Sort" not in due, plan
    assert "Index Scan using agentrun_rdi_due_idx" in due, plan
