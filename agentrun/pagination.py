"""Paging parameters shared by list endpoints: validated, bounded, never a 500."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentrun.validation import INT4_MAX, StrictSerializer

MAX_PAGE_SIZE = 200
MAX_EVENT_PAGE = 500
# The seed capped a run's command list at 100 (`listCommands`: clamp(limit, 1, 100)); we
# answer 400 past it instead of clamping (SPEC §3), at the same bound.
MAX_COMMAND_PAGE = 100


class PageQuery(StrictSerializer):
    """`page` (1-based) and `page_size` (1 to 200) of a page-numbered list."""

    page = serializers.IntegerField(min_value=1, max_value=1_000_000, default=1)
    page_size = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, default=50)


class SeqCursorQuery(StrictSerializer):
    """`after_seq` and `limit` (1 to 500) of a per-run event seq cursor."""

    after_seq = serializers.IntegerField(min_value=0, max_value=INT4_MAX, default=0)
    limit = serializers.IntegerField(
        min_value=1,
        max_value=MAX_EVENT_PAGE,
        default=100,
        help_text=f"1 to {MAX_EVENT_PAGE}; more is a 400 (the seed clamped).",
    )


class CommandCursorQuery(SeqCursorQuery):
    """`after_seq` and `limit` (1 to 100) of a run's command list."""

    limit = serializers.IntegerField(
        min_value=1,
        max_value=MAX_COMMAND_PAGE,
        default=MAX_COMMAND_PAGE,
        help_text=f"1 to {MAX_COMMAND_PAGE}; more is a 400 (the seed clamped).",
    )


class NumberedPageOut(serializers.Serializer[Any]):
    """Where a page-numbered list's page stands: a subclass adds its `items`."""

    total = serializers.IntegerField()
    page = serializers.IntegerField()
    page_size = serializers.IntegerField()
