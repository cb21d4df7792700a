"""The relays' shared claim and count helpers (`agentrun.leased_batches`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentrun.leased_batches import BatchCounts, unbroken_prefixes


def _kept(rows: list[tuple[str, int]]) -> list[tuple[str, int]]:
    return unbroken_prefixes(rows, key=lambda row: row[0], offset=lambda row: row[1])


def test_every_key_keeps_its_rows_from_offset_one_without_a_gap() -> None:
    rows = [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    assert _kept(rows) == rows


def test_a_gap_ends_its_key_and_only_its_key() -> None:
    rows = [("a", 1), ("b", 1), ("a", 3), ("b", 2), ("a", 4), ("b", 3)]
    assert _kept(rows) == [("a", 1), ("b", 1), ("b", 2), ("b", 3)]


def test_a_key_that_does_not_start_at_its_head_is_left_out() -> None:
    assert _kept([("a", 2), ("a", 3), ("b", 1)]) == [("b", 1)]


@dataclass(frozen=True)
class _Counts(BatchCounts):
    retried: int = 0


def test_batch_counts_add_up_field_by_field_and_keep_their_type() -> None:
    total = _Counts(claimed=3, delivered=2, retried=1) + _Counts(claimed=1, refused=1)
    assert total == _Counts(claimed=4, delivered=2, refused=1, retried=1)
    assert total.as_dict() == {"claimed": 4, "delivered": 2, "refused": 1, "retried": 1}
