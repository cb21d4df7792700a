"""The foreign keys' `ON DELETE CASCADE` in the database too (issue 17, item 10; see
agentrun/db_schema.py), so a raw delete of a run takes its outbox rows with it."""

from django.db import migrations

from agentrun.db_schema import database_on_delete


class Migration(migrations.Migration):
    dependencies = [("outbox", "0002_relay_storage")]

    operations = [database_on_delete("outbox")]
