"""Django app config for pipelines: definitions, revisions, runs, the DSL and the Spark driver."""

from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    """Pipelines: definitions and immutable revisions, supervised driver runs, delivery metrics."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "pipelines"
