from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dlq", "0015_bulkfix_fix"),
    ]

    operations = [
        migrations.AddField(
            model_name="bulkaction",
            name="left_out",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="messages a pending delete request held, left untouched: dead-letter id -> reason",
            ),
        ),
    ]
