"""The one backoff formula (`agentrun.backoff`): doubling within its jitter, capped at any
attempt count, never below half of its ceiling."""

from __future__ import annotations

from agentrun.backoff import backoff_ms


def test_backoff_grows_with_each_attempt_within_its_jitter_and_cap() -> None:
    for attempt, (low, high) in enumerate([(50, 100), (100, 200), (200, 400), (250, 500)], 1):
        delays = {backoff_ms(attempt, base_ms=100, cap_ms=500) for _ in range(200)}
        assert low <= min(delays) and max(delays) <= high
        assert len(delays) > 10  # jittered, so workers that failed together spread out


def test_the_cap_holds_at_attempt_ten_thousand() -> None:
    delays = [backoff_ms(10_000, base_ms=1_000, cap_ms=300_000) for _ in range(200)]
    assert all(150_000 <= delay <= 300_000 for delay in delays)


def test_an_attempt_never_waits_less_than_the_one_before_could_until_the_cap() -> None:
    """Monotone up to jitter: below the cap, attempt n's shortest wait is attempt n-1's
    longest; at the cap, every wait is between half the cap and the cap."""
    base, cap = 7, 60_000
    for attempt in range(2, 40):
        delays = [backoff_ms(attempt, base_ms=base, cap_ms=cap) for _ in range(50)]
        longest_before = min(cap, base * 2 ** (attempt - 2))
        assert min(delays) >= min(longest_before, cap // 2)
        assert max(delays) <= cap


def test_attempt_zero_and_a_zero_base_are_harmless() -> None:
    assert 50 <= backoff_ms(0, base_ms=100, cap_ms=500) <= 100
    assert backoff_ms(5, base_ms=0, cap_ms=500) == 0
