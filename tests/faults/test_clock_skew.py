"""Fault: clock skew between workers, within the lease margin.

Run leases are stamped with the API's clock and judged by the reaper's, so a reaper whose
clock runs ahead sees leases expire early. The margin is the reap grace
(`AGENTRUN_LEASE_REAP_GRACE_MS`): a skew smaller than it must never reap a live run. Two
reaper processes run here with their wall clocks moved for real (an LD_PRELOAD shim built
from skewclock.c shifts CLOCK_REALTIME): one 2 s ahead, one 2 s behind, grace 6 s. Four
runs heartbeat a 3 s lease every 0.4 s for 6 s and must all complete; a fifth run's
runner is dead (no heartbeat) and must be reaped, no sooner than expiry + grace - skew.
(The lease and grace leave a live run 7 s between heartbeats before the fast reaper may
take it: with a 1.5 s lease and 3 s grace, a test process stalled 2.5 s on a loaded
machine had all four live runs reaped, which is the machine, not the skew.)
Dispatch and outbox claims compare leases with the database's `now()`, so their workers'
clocks do not enter into it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from runs.models import Run
from runs.services.lifecycle import claim_run, finish_run, heartbeat_run
from runs.services.terminal import TurnResult
from tests.builders import make_run
from tests.faults.harness import child_env, process, wait_for
from tests.faults.invariants import assert_invariants

pytestmark = pytest.mark.django_db(transaction=True)
LEASE_MS, GRACE_MS, SKEW_MS = 3_000, 6_000, 2_000


@pytest.fixture(scope="module")
def skew_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the clock-skew shim")
    shim = tmp_path_factory.mktemp("skew") / "skewclock.so"
    source = Path(__file__).with_name("skewclock.c")
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(shim), str(source), "-ldl"],
                   check=True)  # fmt: skip
    return shim


def _heartbeat(run: Run, stop: threading.Event) -> None:
    try:
        while not stop.wait(0.4):
            heartbeat_run(run_id=run.id, runner_id="runner-live", lease_epoch=1, lease_ms=LEASE_MS)
        finish_run(
            run_id=run.id, runner_id="runner-live", lease_epoch=1, result=TurnResult("completed")
        )
    finally:
        connection.close()


def _reaper(tmp: Path, shim: Path, skew_ms: int) -> object:
    name = f"fault-reaper{skew_ms:+d}"
    env = child_env(tmp, name, LD_PRELOAD=str(shim), SKEW_CLOCK_MS=str(skew_ms))
    argv = [sys.executable, "-m", "tests.faults.loops", "reap", "--grace-ms", str(GRACE_MS)]
    return process(argv, env, tmp / f"{name}.log", name)


def _clock_offset(log: Path) -> float:
    line = wait_for(lambda: log.read_text().splitlines(), 30, "the reaper to start", 0.05)[0]
    return float(json.loads(line)["clock"]) - time.time()


def test_clock_skew_between_workers_within_the_lease_margin(
    skew_shim: Path, tmp_path: Path
) -> None:
    live = [claim_run(run_id=make_run().id, runner_id="runner-live", lease_ms=LEASE_MS)]
    live += [
        claim_run(run_id=make_run().id, runner_id="runner-live", lease_ms=LEASE_MS)
        for _ in range(3)
    ]
    stop = threading.Event()
    beats = [threading.Thread(target=_heartbeat, args=(run, stop)) for run in live]
    # Heartbeats start with the claims, before the reapers: a reaper that took longer to
    # start than a live lease's margin would otherwise find it expired at its first pass.
    for beat in beats:
        beat.start()
    try:
        with _reaper(tmp_path, skew_shim, SKEW_MS) as ahead, _reaper(tmp_path, skew_shim, -SKEW_MS):
            offset = _clock_offset(ahead.log)  # type: ignore[attr-defined]
            dead = claim_run(run_id=make_run().id, runner_id="runner-dead", lease_ms=LEASE_MS)
            expiry = dead.lease_expires_at
            assert expiry is not None
            wait_for(lambda: Run.objects.get(pk=dead.pk).status == "failed", 30, "the reap", 0.02)
            reaped_at = timezone.now()
            time.sleep(max(0.0, 6 - (timezone.now() - expiry).total_seconds()))
    finally:
        stop.set()
        for beat in beats:
            beat.join(timeout=10)
    earliest = expiry + timedelta(milliseconds=GRACE_MS - SKEW_MS)
    statuses = sorted(Run.objects.get(pk=run.pk).status for run in live)
    print(
        f"\nreaper clocks {offset:+.2f}s / -{SKEW_MS / 1000:.0f}s, grace {GRACE_MS} ms, lease "
        f"{LEASE_MS} ms: live runs {statuses}; dead run reaped "
        f"{(reaped_at - expiry).total_seconds():.2f}s after its lease expired"
    )
    assert abs(offset - SKEW_MS / 1000) < 0.5, "the skew shim is not in effect"
    assert statuses == ["completed"] * 4, "a live run was reaped"
    assert reaped_at >= earliest - timedelta(milliseconds=100)
    assert_invariants()
