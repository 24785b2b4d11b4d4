# The schema registry connection of a named Kafka cluster (issue #31): all optional, empty for existing rows.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0005_runner_hosts"),
    ]

    operations = [
        migrations.AddField(
            model_name="kafkacluster",
            name=name,
            field=models.CharField(blank=True, max_length=length),
        )
        for name, length in (
            ("registry_url", 1000),
            ("registry_username", 255),
            ("registry_password_ref", 1000),
            ("registry_ca_location", 1000),
            ("registry_certificate_location", 1000),
            ("registry_key_location", 1000),
        )
    ]
