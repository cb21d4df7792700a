"""Paging parameters shared by list endpoints: validated, bounded, never a 500."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentrun.validation import StrictSerializer

MAX_PAGE_SIZE = 200
MAX_EVENT_PAGE = 500


class PageQuery(StrictSerializer):
    """`page` (1-based) and `page_size` (1 to 200) of a page-numbered list."""

    page = serializers.IntegerField(min_value=1, max_value=1_000_000, default=1)
    page_size = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, default=50)


class SeqCursorQuery(StrictSerializer):
    """`after_seq` and `limit` of a per-run seq cursor (events, commands)."""

    after_seq = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_EVENT_PAGE, default=100)


class NumberedPageOut(serializers.Serializer[Any]):
    """Where a page-numbered list's page stands: a subclass adds its `items`."""

    total = serializers.IntegerField()
    page = serializers.IntegerField()
    page_size = serializers.IntegerField()
