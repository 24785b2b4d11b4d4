# Fewer index entries per status change (a bulk replay rewrites each dead letter twice and each attempt once):
# indexes that only some rows need become partial, and key_text keeps one index instead of two.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0004_membership_manages_team"),
        ("dlq", "0012_bulk_delete"),
        ("pipelines", "0003_kafka_clusters"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="deadletter",
            name="dl_status_changed",
        ),
        migrations.RemoveIndex(
            model_name="replay",
            name="replay_state_time",
        ),
        # The plain indexes the fields' db_index made go; the rows' foreign keys stay as they are (a plain
        # AlterField would drop and re-add each constraint, checking every row of a large table again).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="deadletter",
                    name="key_text",
                    field=models.CharField(blank=True, help_text="searchable key prefix", max_length=200),
                ),
                migrations.AlterField(
                    model_name="deadletter",
                    name="replay_of",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="later_failures",
                        to="dlq.deadletter",
                    ),
                ),
                migrations.AlterField(
                    model_name="replay",
                    name="payload_revision",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="dlq.payloadrevision",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {name}",
                    reverse_sql=f"CREATE INDEX {name} ON {table} ({column})",
                )
                for name, table, column in (
                    ("dlq_deadletter_key_text_464cc9d0", "dlq_deadletter", "key_text"),
                    ("dlq_deadletter_key_text_464cc9d0_like", "dlq_deadletter", "key_text"),
                    ("dlq_deadletter_replay_of_id_3d0e6dd2", "dlq_deadletter", "replay_of_id"),
                    ("dlq_replay_payload_revision_id_80c74fe5", "dlq_replay", "payload_revision_id"),
                )
            ],
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                condition=models.Q(("status__in", ["replayed", "skipped"])),
                fields=["status", "status_changed_at"],
                name="dl_closed_changed",
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(fields=["key_text"], name="dl_key_prefix", opclasses=["varchar_pattern_ops"]),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                condition=models.Q(("replay_of__isnull", False)), fields=["replay_of"], name="dl_replay_of"
            ),
        ),
        migrations.AddIndex(
            model_name="replay",
            index=models.Index(
                condition=models.Q(("state", "pending")), fields=["requested_at"], name="replay_pending_time"
            ),
        ),
        migrations.AddIndex(
            model_name="replay",
            index=models.Index(
                condition=models.Q(("payload_revision__isnull", False)),
                fields=["payload_revision"],
                name="replay_revision",
            ),
        ),
    ]
