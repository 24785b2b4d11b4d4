"""Pipelines and their immutable, validated revisions."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from streamforge_web.models import Team


class DesiredState(models.TextChoices):
    """What the operator asked for; supervision makes the actual state follow it."""

    RUNNING = "running", "Running"
    STOPPED = "stopped", "Stopped"


class Pipeline(models.Model):
    """A named Kafka-to-Kafka pipeline owned by a team. Its behaviour is its ``current_revision``'s spec."""

    name = models.SlugField(max_length=63, unique=True)
    description = models.TextField(blank=True)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="pipelines")
    desired_state = models.CharField(
        max_length=16, choices=DesiredState.choices, default=DesiredState.STOPPED
    )
    current_revision = models.ForeignKey(
        "PipelineRevision", on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class RevisionIsImmutable(Exception):
    """Raised on any attempt to change or delete a saved PipelineRevision."""


class PipelineRevision(models.Model):
    """One validated spec of a pipeline, numbered from 1. Never changed or deleted once saved: a change to
    a pipeline is a new revision, and the runs, metrics and dead letters of the old one keep pointing at it."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    comment = models.CharField(max_length=500, blank=True)
    diff = models.TextField(blank=True, help_text="unified diff of the spec against the previous revision")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pipeline", "-number"]
        constraints = [models.UniqueConstraint(fields=["pipeline", "number"], name="one_revision_number")]

    def __str__(self) -> str:
        return f"{self.pipeline.name} r{self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise RevisionIsImmutable(f"revision {self} is immutable; create a new revision instead")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise RevisionIsImmutable(f"revision {self} is immutable and cannot be deleted")
