"""No `LIKE` copy of the session id index (issue 18, bench cells 1 and 9).

A session row is updated by every append to one of its runs (`last_event_seq`) and by each
admission; `updated_at` is indexed, so those updates are not HOT and write an entry into
every index of the table. Django adds a `text_pattern_ops` copy (`*_like`) beside the
primary key of a text column for `LIKE 'prefix%'` lookups; nothing makes one on the
session id (the admin searches it by exact value, `=`), so it is dropped, as the runs app's
0011 and 0012 dropped theirs.
"""

from django.db import migrations

from agentrun.db_schema import drop_like_indexes

NAME = "agentrun_sessions_session_id_31eedfd2_like"


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0003_schema_fidelity")]

    operations = drop_like_indexes({NAME: ("agentrun_sessions", "session_id")})
