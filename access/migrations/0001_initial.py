"""The people and audit models, moved here from the ``streamforge_web`` app (issue #13).

This migration replaces ``streamforge_web.0001_initial`` and creates the same tables under their old names:
a database that already applied that migration counts this one as applied and keeps its tables and rows;
``0002_new_table_names`` then renames the tables to this app's own names.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    replaces = [("streamforge_web", "0001_initial")]

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Team",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.SlugField(max_length=63, unique=True)),
                ("description", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["name"],
                "db_table": "streamforge_web_team",
            },
        ),
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("sequence", models.PositiveBigIntegerField(unique=True)),
                ("created_at", models.DateTimeField()),
                (
                    "actor_name",
                    models.CharField(help_text="kept as text: the record outlives renames", max_length=150),
                ),
                ("action", models.CharField(db_index=True, max_length=64)),
                ("target_type", models.CharField(max_length=64)),
                ("target_id", models.CharField(max_length=128)),
                ("reason", models.TextField(blank=True)),
                ("before_digest", models.CharField(blank=True, max_length=64)),
                ("after_digest", models.CharField(blank=True, max_length=64)),
                ("details", models.JSONField(blank=True, default=dict)),
                ("request_id", models.CharField(blank=True, max_length=64)),
                ("prev_hash", models.CharField(max_length=64, unique=True)),
                ("hash", models.CharField(max_length=64, unique=True)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "streamforge_web_auditevent",
                "ordering": ["-sequence"],
                "indexes": [
                    models.Index(fields=["target_type", "target_id"], name="streamforge_target__6a0552_idx")
                ],
            },
        ),
        migrations.CreateModel(
            name="Membership",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("viewer", "Viewer"),
                            ("operator", "Operator"),
                            ("approver", "Approver"),
                            ("admin", "Admin"),
                        ],
                        default="viewer",
                        max_length=16,
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="access.team",
                    ),
                ),
            ],
            options={
                "db_table": "streamforge_web_membership",
                "constraints": [
                    models.UniqueConstraint(fields=("user", "team"), name="one_membership_per_team")
                ],
            },
        ),
    ]
