"""Team admins: a member with ``manages_team`` may manage their team's memberships (#18 item 5)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("access", "0003_audit_hash_scheme")]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="manages_team",
            field=models.BooleanField(
                default=False, help_text="may manage this team's memberships (a team admin)"
            ),
        ),
    ]
