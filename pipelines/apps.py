"""Django app config for pipelines: definitions, revisions, runs, the DSL and the Spark driver."""

from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    """Pipelines: definitions and immutable revisions, supervised driver runs, delivery metrics."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "pipelines"

    def ready(self) -> None:
        """Declare the ``pipeline`` audit target (named by the pipeline's name), visible to its team; load the
        tasks and the system checks."""
        from access.audit import owned_by_visible_team, register_target
        from pipelines.models import Pipeline

        register_target("pipeline", visible=owned_by_visible_team(Pipeline, field="name"))

        # Registers the system checks; and the Celery tasks in every process, not only in workers: supervision
        # sends them by name, and a process that knows them applies them as Celery is configured (eagerly
        # where tests ask).
        from pipelines import checks, tasks  # noqa: F401
