"""API fuzzing: schemathesis generates requests for every operation of `/api/schema` and
checks every answer: never a 5xx, and always the status codes, content type, headers and
body the document promises (error answers included: the envelope).

Each operation runs with an operator key and with a client key, on a fixed seed
(`derandomize`) and a bounded number of examples, against the Django WSGI app in this
process and the test database. Path ids are real seeded objects half of the time (else
every call would be a 404 and the handlers behind the lookups never run). Long-poll waits
are capped at 0.2 s so that a generated `wait=30` does not stall the run. The counts are
printed at the end of the run (see tests/fuzz/README.md).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation

from agentrun.auth import issue_api_key
from agentrun.wsgi import application
from tests.fuzz.seeds import TENANT, Seeds, make_seeds

EXAMPLES_PER_OPERATION = 12
# `positive_data_acceptance` expects every schema-valid request to succeed. Ours refuse some
# for reasons an OpenAPI document cannot state: a backend profile or tenant that does not
# exist for the key, cross-field rules (`changed_after` with `page`; one event or a list;
# a steer needs `payload.text`), NUL characters that PostgreSQL cannot store. Each such
# refusal is still checked: a 400/404/409 in the documented envelope, never a 5xx.
NOT_EXPRESSIBLE = [schemathesis.checks.positive_data_acceptance]
TALLY: Counter[str] = Counter()


schema = schemathesis.openapi.from_wsgi("/api/schema", application)  # no database access


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    """Print what was tried (recorded in tests/fuzz/README.md)."""
    yield
    operations = sorted(k for k in TALLY if k.startswith("operation "))
    statuses = ", ".join(f"{k[7:]}: {TALLY[k]}" for k in sorted(TALLY) if k.startswith("status"))
    print(
        f"\nschemathesis: {len(operations)} operations, {TALLY['examples']} examples "
        f"(operator and client keys; max_examples {EXAMPLES_PER_OPERATION} per operation and "
        f"key in the fuzzing phase, plus schemathesis's examples and coverage phases); "
        f"by status: {statuses}; server errors: {TALLY['server errors']}"
    )


@pytest.fixture(autouse=True)
def no_key_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzzer sends hundreds of wrong keys from one address; the throttle (its own tests
    in tests/security/test_request_cost.py) would answer them 429 and hide what each
    operation does with bad input."""
    monkeypatch.setattr("agentrun.throttle.MAX_KEY_FAILURES", 10**9)


@pytest.fixture
def seeds(db: None) -> Iterator[Seeds]:
    """The seeded objects. As Django's test client does, the app in this process must not
    close the test's connection (and so its transaction) at the end of each request."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield make_seeds()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def bearers(seeds: Seeds) -> dict[str, str]:
    """An `Authorization` value per role: an operator key and a key of the seeds' tenant."""
    return {
        role: f"Bearer {issue_api_key(tenant_id=tenant, role=role).secret}"
        for role, tenant in (("operator", "ops"), ("client", TENANT))
    }


def _use_seeds(case: Any, seeds: Seeds) -> None:
    """Half of the generated path ids (chosen by a stable hash) become real ones."""
    for name, value in (case.path_parameters or {}).items():
        real = seeds.for_path(case.operation.path, name)
        if real is not None and zlib.crc32(repr(value).encode()) % 2 == 0:
            case.path_parameters[name] = real
    query = case.query if isinstance(case.query, dict) else None
    if query and isinstance(query.get("wait"), (int, float)) and query["wait"] > 0.2:
        query["wait"] = 0.2


def _authorization(case: Any, bearer: str) -> dict[str, str]:
    """The key, unless the case is a negative one that leaves `Authorization` out on purpose
    (schemathesis then expects a 401, and must not see our header put back)."""
    header = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
    if header is not None and header.mode.is_negative and "Authorization" not in case.headers:
        return {}
    return {"Authorization": bearer}


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.parametrize("role", ["operator", "client"])
def test_every_operation_answers_as_documented(
    case: Any, role: str, seeds: Seeds, bearers: dict[str, str]
) -> None:
    _use_seeds(case, seeds)
    response = case.call_and_validate(
        headers=_authorization(case, bearers[role]), excluded_checks=NOT_EXPRESSIBLE
    )
    TALLY["examples"] += 1
    TALLY["server errors"] += response.status_code >= 500  # the check above fails on one
    TALLY[f"status {response.status_code}"] += 1
    TALLY[f"operation {case.operation.method.upper()} {case.operation.path}"] += 1
