"""Dead letters keep what their x-streamforge-pipeline header claimed apart from who owns them, with a
warning when the two disagree; failure-group keys now include the owning team (``dlq.grouping.group_key``),
so existing groups get their keys recomputed from the owner they were stored with."""

import hashlib
from typing import Any

from django.db import migrations, models


def _key(team_id: int, pipeline: str, dlq_topic: str, error_type: str, signature: str) -> str:
    # A copy of dlq.grouping.group_key as of this migration: a migration must not change when that does.
    owner = f"pipeline:{pipeline}" if pipeline else f"topic:{dlq_topic}"
    return hashlib.sha256(f"team:{team_id}\x00{owner}\x00{error_type}\x00{signature}".encode()).hexdigest()


def rekey_groups(apps: Any, schema_editor: Any) -> None:
    FailureGroup = apps.get_model("dlq", "FailureGroup")
    for group in FailureGroup.objects.all().iterator():
        group.key = _key(
            group.team_id, group.pipeline_name, group.dlq_topic, group.error_type, group.signature
        )
        group.save(update_fields=["key"])


class Migration(migrations.Migration):
    dependencies = [("dlq", "0002_dlq_topic_id")]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="claimed_pipeline",
            field=models.CharField(
                blank=True,
                db_default="",
                help_text="the x-streamforge-pipeline header as written (not trusted)",
                max_length=249,
            ),
        ),
        migrations.AddField(
            model_name="deadletter",
            name="ownership_warning",
            field=models.TextField(
                blank=True,
                db_default="",
                help_text="why the headers' claim of ownership was not followed (empty: they agree)",
            ),
        ),
        migrations.AlterField(
            model_name="deadletter",
            name="pipeline_name",
            field=models.CharField(
                blank=True, help_text="the DLQ topic's owning pipeline; kept on delete", max_length=63
            ),
        ),
        migrations.RunPython(rekey_groups, migrations.RunPython.noop),
    ]
