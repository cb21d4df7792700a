"""A dispatch batch's Python per item, cut without changing what it writes (issue 18, eighth
round): the cheaper spellings below are pinned equal to the ones they replaced, and the
settle's BEGIN, carried by its locks' string, leaves a failed settle rolled back and the
next one beginning again."""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from unittest.mock import patch

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from psycopg.pq import TransactionStatus

from agentrun.auth import KEY_PREFIX, mint_key, mint_keys
from agentrun.ids import _ALPHABET, new_id, new_ids
from dispatch.launchers import Launched
from dispatch.models import RunnerDispatchIntent
from dispatch.services import claims
from dispatch.services.claims import (
    Completion,
    IntentClaim,
    claim_intents_with_keys,
    complete_intents,
)
from runs.locks import lock_runs_and_commands
from runs.models import Backend, Event, Run, RunnerJob
from runs.services.event_log import NewEvent, _event_rows
from runs.services.runners import RunnerJobSpec
from tests.dispatch.helpers import make_dispatch_command
from tests.support.psycopg_commands import psycopg_commands


def test_ids_minted_together_are_new_ids_of_the_same_shape() -> None:
    made = new_ids("evt", 50)
    assert len(set(made)) == 50
    for made_id in made:
        assert made_id.startswith("evt_") and len(made_id) == 30
        assert set(made_id[4:]) <= set(_ALPHABET)
    single = new_id("evt")
    assert made[0][4:14] <= single[4:14] <= new_ids("evt", 1)[0][4:14]  # the same clock
    assert new_ids("evt", 0) == []


def test_keys_minted_together_are_keys_as_mint_key_makes_them() -> None:
    one = mint_key("runner")
    many = mint_keys("runner", 20)
    assert len({key.secret for key in many}) == 20 and len({key.id for key in many}) == 20
    for key in [one, *many]:
        head, token = key.secret[: len("ar_runner_")], key.secret[len("ar_runner_") :]
        assert head == f"{KEY_PREFIX}_runner_"
        assert len(base64.urlsafe_b64decode(token + "=")) == 32  # token_urlsafe(32)
        assert len(key.secret) == len(one.secret)
        assert key.key_prefix == key.secret[: len(KEY_PREFIX) + len("runner") + 8]
        assert key.key_digest == hashlib.sha256(key.secret.encode()).hexdigest()
        assert key.id.startswith("key_") and len(key.id) == 30


def _launched(runner_id: str, **details: Any) -> Launched:
    return Launched(
        launcher="local", job_name=f"job-{runner_id}", namespace="local", image="img",
        manager_url="http://m", runner_id=runner_id, source_commit="abc", details=details,
    )  # fmt: skip


def _claim(**overrides: Any) -> IntentClaim:
    base: dict[str, Any] = dict(
        id="rdi_1", lease_owner="w", attempt_count=2, run_id="run_1", command_id="cmd_1",
        runner_job_id="rjob_1", backend_profile="codex", tenant_id="t",
    )  # fmt: skip
    return IntentClaim(**{**base, **overrides})


@pytest.mark.parametrize("details", [{}, {"service_account_name": "sa", "pod": "p"}])
def test_a_dispatched_job_is_the_runner_job_spec_it_was_built_from(details: Any) -> None:
    claim, launched = _claim(), _launched("runner_1", **details)
    job = claims._dispatched_job(claim, launched)
    spec = RunnerJobSpec(
        command_id=claim.command_id,
        attempt_id=f"{claim.id}:{claim.attempt_count}",
        runner_id=launched.runner_id,
        namespace=launched.namespace,
        job_name=launched.job_name,
        manager_url=launched.manager_url,
        image=launched.image,
        source_commit=launched.source_commit,
        service_account_name=launched.details.get("service_account_name"),
    )
    assert job.payload_hash == spec.payload_hash()
    assert job.columns == {name: value for name, value in vars(spec).items() if name != "result"}
    assert job.result == {"launcher": "local", "outcome": launched.outcome, **details}
    row = job.row()
    assert row == {
        **job.columns,
        "intent_id": "rdi_1", "lease_owner": "w", "attempt_count": 2, "id": "rjob_1",
        "run_id": "run_1", "payload_hash": job.payload_hash, "result": job.result,
        "outcome": launched.outcome,
    }  # fmt: skip


def test_a_claims_capacity_limit_is_read_from_its_profiles_text() -> None:
    assert claims._capacity_limit('{"max_concurrent_runs": 3}') == 3
    assert claims._capacity_limit('{"max_concurrent_runs": 3}') == 3  # from the cache
    assert claims._capacity_limit("{}") is None
    assert claims._capacity_limit({"max_concurrent_runs": 2}) == 2
    assert claims._capacity_limit(None) is None
    assert claims._capacity_limit('{"max_concurrent_runs": -1}') is None


def test_event_rows_are_the_events_the_keyword_constructor_made() -> None:
    run = Run(id="run_1", tenant_id="t", status="pending")
    now = timezone.now()
    events = [NewEvent("backend_status", {"phase": "x", "token": "s"}), NewEvent("log", {})]
    rows = _event_rows(run, events, now=now)
    for offset, (row, new) in enumerate(zip(rows, events, strict=True), 1):
        expected = Event(
            id=row.id, run=run, seq=offset, type=new.type, payload=row.payload, created_at=now
        )
        fields = [field.attname for field in Event._meta.concrete_fields]
        assert [getattr(row, name) for name in fields] == [
            getattr(expected, name) for name in fields
        ]
        assert row.run is run  # cached, no query
        assert row._state.adding
    assert rows[0].payload == {"phase": "x", "token": "[redacted]"}
    assert len({row.id for row in rows}) == 2


@pytest.mark.django_db(transaction=True)
def test_a_settle_that_fails_after_its_begin_rolls_back_and_the_next_begins_again() -> None:
    Backend.objects.filter(profile="scripted").update(capacity={})
    for _ in range(4):
        make_dispatch_command()
    keyed = claim_intents_with_keys(owner="w", lease_ms=60_000, limit=4)
    completions = [Completion(claim, _launched(claim.runner_id)) for claim, _ in keyed]

    def failing(**kwargs: Any) -> Any:
        raise RuntimeError("after the locks")

    with (
        patch.object(claims, "append_events_to_runs_locked", failing),
        psycopg_commands() as sent,
        pytest.raises(RuntimeError),
    ):
        complete_intents(completions=completions[:2])
    assert sent == [b"ROLLBACK"]  # the locks' string began it; Django's block rolled it back
    raw = connection.connection
    assert raw.info.transaction_status == TransactionStatus.IDLE  # rolled back
    assert connection.get_autocommit() and not connection.in_atomic_block
    assert RunnerJob.objects.count() == 0
    assert not RunnerDispatchIntent.objects.filter(state="dispatched").exists()
    with psycopg_commands() as sent:
        outcome = complete_intents(completions=completions)
    assert sent == [] and outcome.dispatched == 4 and not outcome.refused
    assert RunnerJob.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_inside_a_callers_transaction_the_settle_carries_no_begin() -> None:
    Backend.objects.filter(profile="scripted").update(capacity={})
    make_dispatch_command()
    keyed = claim_intents_with_keys(owner="w", lease_ms=60_000, limit=1)
    completions = [Completion(claim, _launched(claim.runner_id)) for claim, _ in keyed]
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        Run.objects.count()  # the transaction began with it
        with transaction.atomic():
            lock_runs_and_commands([keyed[0][0].run_id], [keyed[0][0].command_id])
    sqls = [query["sql"] for query in captured.captured_queries]
    assert not any(sql.startswith("BEGIN;") for sql in sqls), sqls
    assert complete_intents(completions=completions).dispatched == 1


@pytest.mark.django_db
def test_rows_read_with_deferred_fields_are_what_from_db_makes_of_them() -> None:
    from agentrun.raw_sql import models_from_rows, select_models_sql
    from runs.locks import _APPEND_DEFERRED

    command = make_dispatch_command()
    tail = "WHERE id = %s"
    for deferred in (_APPEND_DEFERRED, ("workspace_ref", "status"), ()):
        with connection.cursor() as cursor:
            cursor.execute(select_models_sql(Run, tail, deferred=deferred), [command.run_id])
            rows = cursor.fetchall()
        (read,) = models_from_rows(Run, rows, deferred=deferred)
        expected = Run.objects.defer(*deferred).get(pk=command.run_id)
        state = ("_state",)
        assert {k: v for k, v in vars(read).items() if k not in state} == {
            k: v for k, v in vars(expected).items() if k not in state
        }
        assert read.get_deferred_fields() == expected.get_deferred_fields() == set(deferred)
        assert (read._state.adding, read._state.db) == (False, "default")
        assert read.status == expected.status and read.created_at == expected.created_at


def test_canonical_json_is_the_sorted_compact_dumps() -> None:
    import json

    from agentrun.hashing import canonical_json

    for value in [
        {"b": 1, "a": [1.5, None, True], "ü": {"z": "é", "y": '\n"x"'}},
        [],
        "text",
        {"n": float("inf")},
    ]:
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert canonical_json(value) == expected
