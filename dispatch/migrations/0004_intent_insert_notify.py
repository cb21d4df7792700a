"""`NOTIFY agentrun_dispatch` when intents are inserted (issue 18): a listening worker
(`dispatch/listener.py`) claims them in-process at commit instead of waiting for a broker
message. A statement-level trigger: one notification per INSERT statement, whatever the
number of rows (and PostgreSQL folds equal notifications of one transaction into one), so
no service pays a statement for it and the admission's pinned counts stay as they are.
"""

from django.db import migrations

TABLE = "agentrun_runner_dispatch_intents"

CREATE = f"""
CREATE FUNCTION agentrun_notify_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('agentrun_dispatch', '');
  RETURN NULL;
END
$$;
CREATE TRIGGER agentrun_dispatch_intents_notify AFTER INSERT ON {TABLE}
  FOR EACH STATEMENT EXECUTE FUNCTION agentrun_notify_dispatch();
"""

DROP = f"""
DROP TRIGGER agentrun_dispatch_intents_notify ON {TABLE};
DROP FUNCTION agentrun_notify_dispatch();
"""


class Migration(migrations.Migration):
    dependencies = [("dispatch", "0003_database_on_delete")]

    operations = [migrations.RunSQL(CREATE, DROP)]
