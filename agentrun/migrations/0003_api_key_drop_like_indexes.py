"""No `text_pattern_ops` copies of the API key indexes (issue 18, bench cells 3 and 6).

Django adds a `*_like` copy beside the index of a text primary key or unique column, for
`LIKE 'prefix%'` lookups: here `id` and `key_digest`. Nothing makes such a lookup: a key is
found by its exact digest, and the admin's search of `id` is a case-insensitive contains
(`UPPER(id) LIKE '%...%'`), which a pattern index cannot serve either. Each was one more
index entry per issued key (a runner key per dispatched run) and per non-HOT update of a
key. The outbox did the same in its 0002.
"""

from django.db import migrations

from agentrun.db_schema import drop_like_indexes

TABLE = "agentrun_api_keys"
LIKE_INDEXES = {
    "agentrun_api_keys_id_9ad08892_like": "id",
    "agentrun_api_keys_key_digest_f616bccb_like": "key_digest",
}


class Migration(migrations.Migration):
    dependencies = [("agentrun", "0002_api_key_expires_at")]

    operations = drop_like_indexes({name: (TABLE, column) for name, column in LIKE_INDEXES.items()})
