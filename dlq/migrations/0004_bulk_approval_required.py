"""A bulk action remembers that it needs an approval (``approval_required``), so no worker runs it without
one. Existing actions that had a bulk approval request are marked; a request still pending for an action
that no longer awaits approval (cancelled before the state machine closed such requests) is closed as
cancelled, so it cannot be approved later."""

from typing import Any

from django.db import migrations, models


def mark_existing(apps: Any, schema_editor: Any) -> None:
    bulk_action = apps.get_model("dlq", "BulkAction")
    approval_request = apps.get_model("dlq", "ApprovalRequest")
    bulk_action.objects.filter(approvals__kind="bulk").update(approval_required=True)
    approval_request.objects.filter(kind="bulk", state="pending").exclude(
        bulk__state="awaiting_approval"
    ).update(state="cancelled", decision_reason="withdrawn: the bulk action no longer awaits approval")


class Migration(migrations.Migration):
    dependencies = [
        ("dlq", "0003_dead_letter_claimed_pipeline"),
    ]

    operations = [
        migrations.AddField(
            model_name="bulkaction",
            name="approval_required",
            field=models.BooleanField(
                default=False, help_text="runs only after an approver other than its creator approved it"
            ),
        ),
        migrations.RunPython(mark_existing, migrations.RunPython.noop),
    ]
