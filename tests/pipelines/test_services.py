"""Creating and revising pipelines: immutable revisions with diffs, audited, admins only."""

import pytest
from django.core.exceptions import PermissionDenied

from access.audit import verify_chain
from access.models import AuditEvent
from pipelines.models import PipelineRevision, RevisionIsImmutable
from pipelines.services import create_pipeline, dry_run, revise_pipeline, sample_message
from pipelines.spec import SpecError, parse_spec
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db


def test_creating_a_pipeline_stores_revision_one_and_audits_it(admin_user, team):
    pipeline = create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    revision = pipeline.current_revision
    assert revision.number == 1
    assert revision.author == admin_user
    assert revision.spec == parse_spec(github_spec(), pipeline_name="github").to_json()
    event = AuditEvent.objects.get(target_type="pipeline")
    assert (event.action, event.target_id, event.actor_name) == ("pipeline.create", "github", "ada")


@pytest.mark.kafka
@pytest.mark.redis
def test_a_change_makes_a_new_current_revision_with_a_readable_diff(
    admin_user, team, django_capture_on_commit_callbacks
):
    pipeline = create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    changed = github_spec()
    changed["destinations"][0]["filter"] = "AND:/type,==,PushEvent:/public,==,true"
    with django_capture_on_commit_callbacks(execute=True):  # the anchors are written after commit
        revision = revise_pipeline(
            actor=admin_user, pipeline=pipeline, spec=changed, comment="public pushes only"
        )
    pipeline.refresh_from_db()
    assert revision.number == 2
    assert pipeline.current_revision == revision
    assert '-      "filter": "/type,==,PushEvent",' in revision.diff
    assert '+      "filter": "AND:/type,==,PushEvent:/public,==,true",' in revision.diff
    assert verify_chain().ok


def test_a_description_only_change_is_audited(admin_user, team):
    pipeline = create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    revision = revise_pipeline(
        actor=admin_user, pipeline=pipeline, spec=github_spec(), description="GitHub pushes", comment="docs"
    )
    assert revision.number == 1
    event = AuditEvent.objects.filter(target_type="pipeline").order_by("-sequence").first()
    assert (event.action, event.target_id, event.actor_name, event.reason) == (
        "pipeline.describe",
        "github",
        "ada",
        "docs",
    )
    assert event.details == {"revision": 1, "description_before": "", "description": "GitHub pushes"}


def test_an_unchanged_spec_makes_no_new_revision(admin_user, team):
    pipeline = create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    assert revise_pipeline(actor=admin_user, pipeline=pipeline, spec=github_spec()).number == 1
    assert PipelineRevision.objects.count() == 1


def test_a_saved_revision_can_be_neither_changed_nor_deleted(admin_user, team):
    revision = create_pipeline(
        actor=admin_user, name="github", team=team, spec=github_spec()
    ).current_revision
    revision.comment = "rewritten history"
    with pytest.raises(RevisionIsImmutable):
        revision.save()
    with pytest.raises(RevisionIsImmutable):
        revision.delete()


def test_an_invalid_revision_is_refused_and_nothing_is_stored(admin_user, team):
    pipeline = create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    bad = github_spec()
    bad["destinations"][0]["transform"] = "EXTRACT:actor"
    with pytest.raises(SpecError) as caught:
        revise_pipeline(actor=admin_user, pipeline=pipeline, spec=bad)
    assert "destinations.0.transform" in caught.value.errors
    assert PipelineRevision.objects.count() == 1


def test_a_viewer_cannot_create_or_revise_pipelines(viewer, team):
    with pytest.raises(PermissionDenied):
        create_pipeline(actor=viewer, name="github", team=team, spec=github_spec())


def test_dry_run_reports_each_message_per_destination(github_event_objects):
    spec = parse_spec(github_spec(), pipeline_name="github")
    push = next(e for e in github_event_objects if e["type"] == "PushEvent")
    pr = next(e for e in github_event_objects if e["type"] == "PullRequestEvent")
    messages = [
        sample_message({"value": push}),
        sample_message({"value": pr}),
        sample_message({"value": "{not json"}),
    ]
    results = dry_run(spec=spec, messages=messages, now_ms=0)
    assert [r.outcome for r in results[0]] == ["produced", "filtered"]
    assert results[0][0].value == '{{"login":"{}"}}'.format(push["actor"]["login"])
    assert [r.outcome for r in results[1]] == ["filtered", "produced"]
    assert [(r.outcome, r.error_type) for r in results[2]] == [
        ("dead_lettered", "MessageDeserialization")
    ] * 2
