"""The API's JSON parser, with a bound on nesting.

Every later step that walks a body (strict serializers, canonical hashing, redaction,
jsonb) recurses, so a body nested a few hundred levels deep ran out of stack somewhere
past the parser and answered an HTML 500. Depth is bounded once, here, as a 400 in the
envelope: no real request nests more than a few dozen levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 64


def json_depth(value: Any) -> int:
    """How deep `value` nests (a scalar is 0, `[]` and `{}` are 1); iterative, so the
    measure itself cannot run out of stack."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            pending.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            pending.extend((child, depth + 1) for child in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def nests_deeper_than(value: Any, limit: int) -> bool:
    """`json_depth(value) > limit`, one level at a time and only through the containers:
    the parser asks it of every body (a batch of 100 events is about 900 values, which
    `json_depth` queued one by one), and it stops past `limit` levels."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, _CONTAINERS)
        ]
    return depth > limit


_CONTAINERS = (dict, list)


class DepthLimitedJSONParser(JSONParser):
    """`JSONParser` that refuses bodies nested deeper than `MAX_JSON_DEPTH`."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as error:  # deeper than the interpreter's own limit
            raise ParseError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels") from error
        if nests_deeper_than(data, MAX_JSON_DEPTH):
            raise ParseError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels")
        return data
