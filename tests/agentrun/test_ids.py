"""`agentrun.ids`: the pair-table ULID digits are the digit-at-a-time ones (issue 18 made
the encoding faster; the ids must not change shape or order)."""

from __future__ import annotations

import random

from agentrun.ids import _ALPHABET, new_id, ulid_digits


def digit_at_a_time(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, index = divmod(value, 32)
        chars.append(_ALPHABET[index])
    return "".join(reversed(chars))


def test_the_digits_are_the_plain_base32_ones() -> None:
    rng = random.Random(18)
    cases = [(0, 0), (2**48 - 1, 2**80 - 1), (1, 1)]
    cases += [(rng.getrandbits(48), rng.getrandbits(80)) for _ in range(5_000)]
    for millis, randomness in cases:
        expected = digit_at_a_time(millis, 10) + digit_at_a_time(randomness, 16)
        assert ulid_digits((millis << 80) | randomness) == expected


def test_ids_have_the_prefix_and_26_digits_and_sort_by_time() -> None:
    made = new_id("evt")
    assert made.startswith("evt_") and len(made) == 30
    assert set(made[4:]) <= set(_ALPHABET)
    assert made[4:14] <= new_id("evt")[4:14]
