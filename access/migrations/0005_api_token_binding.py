"""API tokens bound to their user's credentials (security review #28, finding 6). Tokens that exist are
bound to their user's password as it is now, so they keep working until it changes."""

import hashlib

import django.db.models.deletion
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def bind_existing_tokens(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Token = apps.get_model("authtoken", "Token")
    ApiTokenBinding = apps.get_model("access", "ApiTokenBinding")
    ApiTokenBinding.objects.bulk_create(
        ApiTokenBinding(
            token_id=token.pk, credentials=hashlib.sha256(token.user.password.encode()).hexdigest()
        )
        for token in Token.objects.select_related("user")
    )


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0004_membership_manages_team"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiTokenBinding",
            fields=[
                (
                    "token",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="binding",
                        serialize=False,
                        to="authtoken.token",
                    ),
                ),
                (
                    "credentials",
                    models.CharField(help_text="SHA-256 (hex) of the password hash at issue", max_length=64),
                ),
            ],
        ),
        migrations.RunPython(bind_existing_tokens, migrations.RunPython.noop),
    ]
