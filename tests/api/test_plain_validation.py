"""The runner append's plain validation (`StrictSerializer.plain_fast_path`) gives exactly
what DRF's full path gives: the same validated data for every body it accepts, and every
body it does not accept goes to the full path, so the 400s are DRF's own."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from runs.api.serializers import EventAppendIn


class FullPathEventAppendIn(EventAppendIn):
    plain_fast_path = False


GOOD: dict[str, Any] = {
    "runner_id": "runner-1",
    "lease_epoch": 3,
    "type": "log",
    "payload": {"stream": "stdout", "message": "line 1"},
}
# Values each key may take in the generated bodies: valid ones and every kind of wrong one.
VARIANTS: dict[str, list[Any]] = {
    "runner_id": ["r", "x" * 200, "x" * 201, "", " ", "a\x00b", "\ud800", "é", 5, True, None, []],
    "lease_epoch": [0, 2**31 - 1, 2**31, -1, "3", 3.0, True, None, {}],
    "type": ["log", "backend_status", "token_usage", "nope", "", 1, None, ["log"]],
    "payload": [
        {},
        {"phase": "command-terminal"},
        {"phase": "running"},
        {"input_tokens": 5, "model": "m"},
        {"input_tokens": -1},
        {"input_tokens": True},
        {"model": 5},
        {"a": "\x00"},
        {"\x00": 1},
        {"a": "\ud800"},
        {"big": "x" * (1024 * 1024)},
        [],
        "text",
        None,
    ],
    "events": [[{"type": "log"}], [], None],
    "extra": [1],
}


def _outcome(serializer_class: type[EventAppendIn], body: Any) -> tuple[bool, Any, Any]:
    serializer = serializer_class(data=copy.deepcopy(body), context={"json_body": True})
    valid = serializer.is_valid()
    return valid, serializer.validated_data if valid else None, serializer.errors


def _bodies() -> list[Any]:
    rng = random.Random(18)
    bodies: list[Any] = [GOOD, {}, [], "x", None, {k: v for k, v in GOOD.items() if k != "type"}]
    for key, values in VARIANTS.items():
        bodies.extend({**GOOD, key: value} for value in values)
        bodies.append({k: v for k, v in GOOD.items() if k != key})
    for _ in range(300):
        body = {}
        for key, values in VARIANTS.items():
            if rng.random() < 0.6 or key in ("runner_id", "lease_epoch"):
                body[key] = rng.choice(values) if rng.random() < 0.3 else GOOD.get(key, values[0])
        bodies.append(body)
    return bodies


def _batches() -> list[Any]:
    """Batch bodies (`events`): good items, items with every kind of wrong value, empty,
    missing payloads (DRF stores the default), too many items, items that are not objects."""
    rng = random.Random(180)
    item_variants: dict[str, list[Any]] = {
        "type": VARIANTS["type"],
        # Every payload variant but the 1 MiB one (per item, it made the test slow).
        "payload": [p for p in VARIANTS["payload"] if not (isinstance(p, dict) and "big" in p)],
        "extra": [1],
    }
    good_item = {"type": "log", "payload": {"stream": "stdout", "message": "x"}}
    base = {"runner_id": "runner-1", "lease_epoch": 3}
    bodies: list[Any] = [
        {**base, "events": [good_item] * 3},
        {**base, "events": [{"type": "log"}, good_item]},
        {**base, "events": [good_item] * 500},
        {**base, "events": [good_item] * 501},
        {**base, "events": []},
        {**base, "events": [good_item, "log"]},
        {**base, "events": [good_item, None]},
        {**base, "events": {"type": "log"}},
        {**base, "events": [good_item], "payload": {}},
        {**base, "events": [good_item], "type": "log"},
        {**base, "events": [{"type": "backend_status", "payload": {"phase": "command-terminal"}}]},
        {**base, "events": [{"type": "token_usage", "payload": {"input_tokens": -1}}]},
    ]
    for _ in range(200):
        items = []
        for _ in range(rng.randint(1, 4)):
            item = dict(good_item)
            for key, values in item_variants.items():
                if rng.random() < 0.25:
                    item[key] = rng.choice(values)
                elif key != "extra" and rng.random() < 0.1:
                    item.pop(key, None)
            items.append(item)
        bodies.append({**base, "events": items})
    return bodies


@pytest.mark.parametrize("body", _bodies() + _batches())
def test_plain_path_agrees_with_the_full_path(body: Any) -> None:
    assert _outcome(EventAppendIn, body) == _outcome(FullPathEventAppendIn, body)


def test_a_single_event_is_validated_without_building_the_fields() -> None:
    serializer = EventAppendIn(data=copy.deepcopy(GOOD), context={"json_body": True})
    assert serializer.is_valid()
    assert "fields" not in serializer.__dict__  # DRF's cached deep copy was never made
    assert serializer.new_events()[0].payload == GOOD["payload"]


def test_a_batch_is_validated_without_building_the_fields() -> None:
    events = [{"type": "log", "payload": {"n": n}} for n in range(100)] + [{"type": "log"}]
    body = {"runner_id": "r", "lease_epoch": 1, "events": events}
    serializer = EventAppendIn(data=copy.deepcopy(body), context={"json_body": True})
    assert serializer.is_valid()
    assert "fields" not in serializer.__dict__
    assert [event.payload for event in serializer.new_events()] == [
        {"n": n} for n in range(100)
    ] + [{}]


def test_a_batch_with_a_bad_item_takes_the_full_path_for_its_400() -> None:
    body = {"runner_id": "r", "lease_epoch": 1, "events": [{"type": "log"}, {"type": "nope"}]}
    serializer = EventAppendIn(data=body, context={"json_body": True})
    assert not serializer.is_valid()
    assert "fields" in serializer.__dict__
    assert "events" in serializer.errors
