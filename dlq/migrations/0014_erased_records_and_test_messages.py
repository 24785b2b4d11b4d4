# Security review #28: where an approved delete's erased content is still on Kafka (the topic browser withholds
# those records), and the console's own record of who sent each test message (never the header).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dlq", "0013_lean_indexes"),
        ("pipelines", "0003_kafka_clusters"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ErasedRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("topic", models.CharField(max_length=249)),
                ("partition", models.IntegerField()),
                ("offset", models.BigIntegerField()),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("dlq", "The DLQ record"),
                            ("source", "The source record it names"),
                            ("replay", "A record a replay of it produced"),
                        ],
                        max_length=8,
                    ),
                ),
                (
                    "dead_letter_id",
                    models.BigIntegerField(
                        blank=True, help_text="the erased dead letter (its row may be purged)", null=True
                    ),
                ),
                ("erased_at", models.DateTimeField(auto_now_add=True)),
                (
                    "cluster",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="pipelines.kafkacluster",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["topic", "partition", "offset"], name="erased_coordinates")],
            },
        ),
        migrations.CreateModel(
            name="ProducedTestMessage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("topic", models.CharField(max_length=249)),
                ("partition", models.IntegerField()),
                ("offset", models.BigIntegerField()),
                ("produced_at", models.DateTimeField(auto_now_add=True)),
                (
                    "cluster",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="pipelines.kafkacluster",
                    ),
                ),
                (
                    "pipeline",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="pipelines.pipeline",
                    ),
                ),
                (
                    "produced_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["topic", "partition", "offset"], name="test_message_coordinates")
                ],
            },
        ),
    ]
