"""A bounded soak: sustained mixed load from several processes, then every invariant over
the whole database.

Four load processes (tests/soak/load.py) run for `AGENTRUN_SOAK_SECONDS` (45 by default)
against the test database, racing on eight shared sessions: turns with every `when_busy`,
steers, cancels, runner work with 2 s leases (claims, acks, event batches, finishes, and
runs abandoned mid-turn for the reaper), queue tasks (some queued behind a session),
scheduler and reaper passes. A `relay_outbox --loop` process relays the outbox to the test
Kafka broker meanwhile. Afterwards the outbox is drained, the reaper runs, and the
invariants of tests/faults/invariants.py are checked: violations must be 0, and so must
unexpected errors (a refusal the API answers with a 4xx is expected and counted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from pytest_django.fixtures import Settings as SettingsWrapper

from runs.services.reaper import reap_expired_leases
from tests.faults.harness import child_env, manage, process, wait_for
from tests.faults.invariants import assert_invariants
from tests.faults.outbox_load import undelivered
from tests.outbox.builders import use_outbox
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.django_db(transaction=True)
PROCESSES = 4
SECONDS = float(os.environ.get("AGENTRUN_SOAK_SECONDS", "45"))


def _load(tmp: Path, seed: int) -> subprocess.Popen[str]:
    env = child_env(tmp, f"soak-{seed}", AGENTRUN_QUEUE_CONCURRENCY='{"nightly": 2}')
    argv = [sys.executable, "-m", "tests.soak.load", "--seed", str(seed)]
    return subprocess.Popen(
        [*argv, "--seconds", str(SECONDS)],
        env=env,
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=(tmp / f"soak-{seed}.log").open("w"),
        text=True,
    )


def test_soak_mixed_load_from_several_processes(
    settings: SettingsWrapper, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    use_outbox(settings, kafka_broker)
    settings.AGENTRUN_QUEUE_CONCURRENCY = {"nightly": 2}
    relay = process(
        manage("relay_outbox", "--loop", "--idle-seconds", "0.1"),
        child_env(tmp_path, "soak-relay"),
        tmp_path / "relay.log",
        "soak-relay",
    )
    started = time.monotonic()
    ops: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    with relay:
        loads = [_load(tmp_path, seed) for seed in range(1, PROCESSES + 1)]
        for load in loads:
            out, _ = load.communicate(timeout=SECONDS + 120)
            assert load.returncode == 0, tmp_path / f"soak-{loads.index(load) + 1}.log"
            result = json.loads(out.strip().splitlines()[-1])
            ops.update(result["ops"])
            refused.update(result["refused"])
            errors.update(result["errors"])
        wait_for(lambda: undelivered() == 0, 90, "the outbox to drain", 0.2)
        time.sleep(2.5)  # the load's last 2 s leases lapse
        reap_expired_leases(limit=100_000, grace_ms=0)  # runs the load abandoned mid-turn
        wait_for(lambda: undelivered() == 0, 90, "the outbox to drain", 0.2)
    elapsed = time.monotonic() - started
    report = assert_invariants(outbox=True, reap=False)
    print(
        f"soak: {PROCESSES} processes x {SECONDS:.0f}s ({elapsed:.0f}s with the drain); "
        f"operations by kind {dict(sorted(ops.items()))} = {sum(ops.values())}; refusals "
        f"(4xx answers) {sum(refused.values())}: {dict(refused.most_common(8))}; unexpected "
        f"errors {sum(errors.values())}; rows {report.rows}; invariants checked "
        f"{len(report.checked)}; violations: {report.total_violations}"
    )
    assert not errors, dict(errors)
    assert sum(ops.values()) > 1_000
