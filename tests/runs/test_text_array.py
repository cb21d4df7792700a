"""`runs.sql.text_array`: the `text[]` literal the event statement binds as one string must
read back as the very list, whatever the elements hold (session ids and tenants are input)."""

from __future__ import annotations

import pytest
from django.db import connection

from runs.sql import text_array

TRICKY = ["plain", 'with "quotes"', "back\\slash", "a,b", "{braces}", "", "NULL", " sp ", "é✓"]


@pytest.mark.django_db
@pytest.mark.parametrize("values", [[], ["one"], TRICKY])
def test_the_literal_reads_back_as_the_list(values: list[str]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[]", [text_array(values)])
        (read,) = cursor.fetchone()
    assert read == values
