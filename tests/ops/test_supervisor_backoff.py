"""The supervisor's restart delay is the one backoff formula (`agentrun.backoff`)."""

from __future__ import annotations

from pathlib import Path

from ops.supervisor import Policy, Supervisor


def test_a_restart_waits_half_to_all_of_the_doubled_base_and_never_past_the_cap(
    tmp_path: Path,
) -> None:
    policy = Policy(backoff_base_s=0.5, backoff_cap_s=10.0)
    supervisor = Supervisor({}, env={}, state_path=tmp_path / "state.json", policy=policy)
    for deaths, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0), (6, 10.0), (50, 10.0)):
        delays = {supervisor._restart_delay_s(deaths) for _ in range(50)}
        assert all(ceiling / 2 <= delay <= ceiling for delay in delays), (deaths, delays)
