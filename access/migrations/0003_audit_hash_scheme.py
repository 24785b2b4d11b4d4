"""Audit events say how their hash was made: events that exist now were hashed with plain SHA-256 (legacy)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("access", "0002_new_table_names")]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="scheme",
            field=models.CharField(
                choices=[("sha256", "SHA-256 (legacy, unkeyed)"), ("hmac-sha256", "HMAC-SHA256")],
                default="sha256",
                max_length=16,
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="auditevent",
            name="key_id",
            field=models.CharField(
                blank=True, help_text="fingerprint of the HMAC key; empty for sha256", max_length=16
            ),
        ),
    ]
