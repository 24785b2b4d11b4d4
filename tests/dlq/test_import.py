"""Importing a JSON Lines export (``POST /api/dlq/import/``, the ``/dlq/import/`` page): the rows land parked
in the chosen pipeline, owned by its team, masked as the export had them; a dry run counts without writing;
a file that is not ours or does not fit the pipeline is refused whole, naming its bad lines; the same rows
are never imported twice; every import is audited with counts, never a payload."""

from __future__ import annotations

import base64
import json
import uuid
from types import SimpleNamespace

import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from access.models import AuditEvent, Role
from dlq.models import DeadLetter, FailureGroup, Status
from dlq.services import MASK, imports
from dlq.services.replays import replay_record
from pipelines.services import create_pipeline
from pipelines.spark.writer import replay_scope
from tests.dlq.conftest import api_for, github_spec
from tests.factories import TeamFactory, member

pytestmark = pytest.mark.django_db

SECRET = "octocat@example.com"
EVENT = json.dumps({"type": "PushEvent", "actor": {"login": "octocat", "email": SECRET}}).encode()


def export_jsonl(user, query: str = "") -> bytes:
    response = api_for(user).get(f"/api/dlq/messages/export/?as=json&{query}")
    assert response.status_code == 200
    return b"".join(response.streaming_content)  # type: ignore[attr-defined]


def post_import(user, body: bytes | None, pipeline_id, *, dry_run: bool | str = False, name="dl.jsonl"):
    data: dict = {"pipeline": pipeline_id, "dry_run": str(dry_run).lower()}
    if body is not None:
        data["file"] = SimpleUploadedFile(name, body, content_type="application/x-ndjson")
    return api_for(user).post("/api/dlq/import/", data, format="multipart")


def stored_headers(dl: DeadLetter) -> dict[str, str | None]:
    return {n: None if v is None else base64.b64decode(v).decode() for n, v in dl.headers}


@pytest.fixture
def letters(pipeline, park):
    """Three dead letters of ``pipeline`` (team data-platform): two JSON pushes, one payload that is not JSON."""
    return park(
        pipeline,
        [
            (b"cust-1", EVENT, "JsonPathNotFound", "no /payload/size"),
            (b"cust-2", EVENT, "JsonPathNotFound", "no /payload/size"),
            (b"cust-3", b"not json " + SECRET.encode(), "MessageDeserialization", "Unexpected character"),
        ],
    )


@pytest.fixture
def payments(people, pipeline):
    """Team payments' pipeline reading the same source topic with the same destination names (its own DLQ
    and destination topics): where another installation's export of ``pipeline`` is imported."""
    team = TeamFactory(name="payments")
    suffix = uuid.uuid4().hex[:8]
    source = pipeline.current_revision.spec["source"]["topics"][0]
    spec = github_spec(source, suffix)
    spec["dlq"] = {"topic": f"payments.repro-{suffix}.dlq"}
    return create_pipeline(actor=people["admin"], name=f"repro-{suffix}", team=team, spec=spec)


def test_an_export_imported_into_another_team_s_pipeline_lands_parked_and_owned_by_that_team(
    people, pipeline, letters, payments
):
    body = export_jsonl(people["operator"])

    response = post_import(people["foreign"], body, payments.pk)

    assert response.status_code == 201, response.content
    result = response.json()
    assert (result["rows"], result["created"], result["already_imported"]) == (3, 3, 0)
    assert result["destinations"] == {"pushes": 3}
    assert result["error_types"] == {"JsonPathNotFound": 2, "MessageDeserialization": 1}
    imported = {dl.key: dl for dl in DeadLetter.objects.filter(pk__in=result["ids"]).select_related("team")}
    originals = {bytes(dl.key): dl for dl in letters}
    assert set(imported) == set(originals)
    for key, dl in imported.items():
        original = originals[bytes(key)]
        assert dl.status == Status.PARKED
        assert (dl.team.name, dl.pipeline_id, dl.pipeline_name) == ("payments", payments.pk, payments.name)
        assert dl.pk != original.pk
        assert (dl.error_type, dl.error_message, dl.destination) == (
            original.error_type,
            original.error_message,
            original.destination,
        )
        assert dl.source_topic == original.source_topic
        assert (dl.source_partition, dl.source_offset, dl.revision) == (None, None, None)
        assert dl.dlq_topic == payments.current_revision.spec["dlq"]["topic"]
        assert dl.dlq_partition == imports.IMPORTED_PARTITION
        assert dl.claimed_pipeline == pipeline.name
        assert pipeline.name in dl.ownership_warning
        assert dl.group.team_id == dl.team_id
        headers = stored_headers(dl)
        assert headers["trace-id"] == "t-1"  # the record's own headers come back
        assert headers[imports.H_IMPORTED_FROM] == original.coordinates
        assert headers[imports.H_IMPORTED_SOURCE] == (
            f"{original.source_topic}/{original.source_partition}/{original.source_offset}"
        )
        assert headers[imports.H_IMPORTED_ID] == str(original.pk)
        assert headers[imports.H_IMPORTED_MASKED] == "false"
    push = imported[b"cust-1"]
    assert json.loads(bytes(push.value)) == json.loads(EVENT)
    assert bytes(imported[b"cust-3"].value) == bytes(originals[b"cust-3"].value)
    # the importing team sees them; the exporting team's rows stay its own
    listed = api_for(people["foreign"]).get(f"/api/dlq/messages/?pipeline={payments.name}").json()
    assert len(listed["results"]) == 3
    assert not DeadLetter.objects.filter(pk__in=[d.pk for d in letters]).exclude(team__name="data-platform")


def test_a_masked_export_stays_masked_and_says_so(people, pipeline, letters, payments, settings):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    settings.DLQ_MASK_KEYS = True
    settings.DLQ_MASKED_HEADERS = ["Trace-ID"]
    body = export_jsonl(people["viewer"])
    assert all(json.loads(line)["masked"] for line in body.splitlines())

    response = post_import(people["foreign"], body, payments.pk)

    assert response.status_code == 201, response.content
    assert response.json()["masked"] == 3
    rows = list(DeadLetter.objects.filter(pipeline=payments))
    assert len(rows) == 3
    for dl in rows:
        everything = bytes(dl.key or b"") + bytes(dl.value or b"") + json.dumps(stored_headers(dl)).encode()
        assert SECRET.encode() not in everything
        assert b"cust-" not in everything
        assert bytes(dl.key).decode().startswith("withheld: key, ")
        headers = stored_headers(dl)
        assert headers["trace-id"] == MASK
        assert headers[imports.H_IMPORTED_MASKED] == "true"
    by_type = {dl.error_type: dl for dl in rows}
    assert json.loads(bytes(by_type["JsonPathNotFound"].value))["actor"]["email"] == MASK
    assert bytes(by_type["MessageDeserialization"].value).decode().startswith("withheld: not JSON, ")
    # an operator of the importing team sees what was imported: still masked, nothing to unmask
    page = api_for(people["foreign"]).get(f"/api/dlq/messages/{by_type['JsonPathNotFound'].pk}/").json()
    assert SECRET not in json.dumps(page)


def test_a_dry_run_counts_without_writing_or_auditing(people, letters, payments):
    body = export_jsonl(people["operator"])
    before = (DeadLetter.objects.count(), FailureGroup.objects.count())

    response = post_import(people["foreign"], body, payments.pk, dry_run=True)

    assert response.status_code == 200, response.content
    result = response.json()
    assert result["dry_run"] is True
    assert (result["rows"], result["created"], result["already_imported"]) == (3, 0, 0)
    assert result["destinations"] == {"pushes": 3}
    assert result["ids"] == []
    assert (DeadLetter.objects.count(), FailureGroup.objects.count()) == before
    assert not AuditEvent.objects.filter(action="dlq.import").exists()


def test_importing_the_same_file_twice_creates_nothing_the_second_time(people, letters, payments):
    body = export_jsonl(people["operator"])
    assert post_import(people["foreign"], body, payments.pk).status_code == 201

    again = post_import(people["foreign"], body, payments.pk)
    dry = post_import(people["foreign"], body, payments.pk, dry_run=True)

    assert again.status_code == 201
    assert (again.json()["created"], again.json()["already_imported"]) == (0, 3)
    assert dry.json()["already_imported"] == 3
    assert DeadLetter.objects.filter(pipeline=payments).count() == 3
    # a row repeated within one file is imported once too
    first_line = body.splitlines()[0] + b"\n"
    DeadLetter.objects.filter(pipeline=payments).delete()
    doubled = post_import(people["foreign"], first_line * 2, payments.pk)
    assert (doubled.json()["created"], doubled.json()["already_imported"]) == (1, 1)


def test_each_import_is_audited_once_on_the_pipeline_with_counts_and_never_a_payload(
    people, pipeline, letters, payments
):
    body = export_jsonl(people["operator"])
    result = post_import(people["foreign"], body, payments.pk, name="incident-42.jsonl").json()

    events = list(AuditEvent.objects.filter(action="dlq.import"))
    assert len(events) == 1
    event = events[0]
    assert (event.actor_name, event.target_type, event.target_id) == ("fred", "pipeline", payments.name)
    assert event.details["import_id"] == result["import_id"]
    assert event.details["file"] == "incident-42.jsonl"
    assert (event.details["rows"], event.details["created"], event.details["already_imported"]) == (3, 3, 0)
    assert event.details["exported_from"] == [pipeline.name]
    assert SECRET not in json.dumps(event.details)
    assert "cust-" not in json.dumps(event.details)


def test_a_file_that_is_not_ours_is_refused_whole_naming_each_bad_line(people, letters, payments):
    good = export_jsonl(people["operator"]).splitlines()
    foreign = json.loads(good[1])
    foreign["export_format"] = "someone.else.v3"
    lines = [good[0], json.dumps(foreign).encode(), b"{not json", b'["a list"]', good[2]]

    response = post_import(people["foreign"], b"\n".join(lines) + b"\n", payments.pk)

    assert response.status_code == 400
    problems = response.json()["file"][0]
    assert problems.startswith("nothing was imported: ")
    assert "line 2: not a StreamForge dead-letter export (export_format is 'someone.else.v3'" in problems
    assert "line 3: not JSON" in problems
    assert "line 4: not a JSON object" in problems
    assert "line 1:" not in problems
    assert "line 5:" not in problems
    assert not DeadLetter.objects.filter(pipeline=payments).exists()
    assert not AuditEvent.objects.filter(action="dlq.import").exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda r: r.pop("export_format"), "not a StreamForge dead-letter export (no export_format)"),
        (lambda r: r.pop("value"), "missing value (exported without its payload?)"),
        (lambda r: r.update(source_offset="12"), "source_offset is not a whole number"),
        (lambda r: r.update(dlq_partition=2**40), "dlq_partition is out of range"),
        (lambda r: r.update(value_encoding="rot13"), "value_encoding is not one of"),
        (lambda r: r.update(value="@@", value_encoding="base64"), "value is not base64"),
        (lambda r: r.update(last_failed_at="yesterday"), "last_failed_at is not an ISO-8601 time"),
        (lambda r: r.update(headers=[{"name": "a"}]), "headers.0 is not a {name, value, encoding} object"),
        (lambda r: r.update(error_type=""), "error_type is empty"),
    ],
)
def test_a_row_with_a_bad_field_is_refused_naming_it(people, letters, payments, change, reason):
    row = json.loads(export_jsonl(people["operator"]).splitlines()[0])
    change(row)

    response = post_import(people["foreign"], json.dumps(row).encode(), payments.pk)

    assert response.status_code == 400
    assert f"line 1: {reason}" in response.json()["file"][0]


def test_a_file_whose_destinations_are_not_the_pipeline_s_is_refused(people, pipeline, letters):
    suffix = uuid.uuid4().hex[:8]
    spec = github_spec(pipeline.current_revision.spec["source"]["topics"][0], suffix)
    spec["destinations"][0]["name"] = "commits"
    spec["dlq"] = {"topic": f"other-{suffix}.dlq"}
    other = create_pipeline(actor=people["admin"], name=f"other-{suffix}", team=pipeline.team, spec=spec)
    body = export_jsonl(people["operator"])

    response = post_import(people["operator"], body, other.pk, dry_run=True)

    assert response.status_code == 400
    problems = response.json()["file"][0]
    assert "line 1: destination 'pushes' is not a destination of pipeline" in problems
    assert "(its destinations: commits, pull-requests)" in problems
    assert not DeadLetter.objects.filter(pipeline=other).exists()


def test_a_file_from_another_source_topic_is_refused(people, pipeline, letters):
    suffix = uuid.uuid4().hex[:8]
    other = create_pipeline(
        actor=people["admin"],
        name=f"other-{suffix}",
        team=pipeline.team,
        spec=github_spec(f"x-{suffix}", suffix),
    )

    response = post_import(people["operator"], export_jsonl(people["operator"]), other.pk)

    assert response.status_code == 400
    assert "is not a source of pipeline" in response.json()["file"][0]


def test_a_viewer_may_not_import_into_their_own_team_s_pipeline(people, pipeline, letters):
    response = post_import(people["viewer"], export_jsonl(people["operator"]), pipeline.pk)

    assert response.status_code == 403
    assert "operator" in response.json()["detail"]


def test_another_team_s_pipeline_is_refused_as_if_it_did_not_exist(people, pipeline, letters, payments):
    body = export_jsonl(people["operator"])

    other_team = post_import(people["foreign"], body, pipeline.pk)
    nowhere = post_import(people["foreign"], body, 2**62)

    refused = {"pipeline": ["no such pipeline in your teams"]}
    assert (other_team.status_code, other_team.json()) == (400, refused)
    assert (nowhere.status_code, nowhere.json()) == (400, refused)
    assert DeadLetter.objects.filter(pipeline=pipeline).count() == 3


@pytest.mark.parametrize(
    ("body", "pipeline_value", "dry_run", "field"),
    [
        (None, "PIPELINE", "false", "file"),
        (b"", "PIPELINE", "false", "file"),
        (b"\n\n", "PIPELINE", "false", "file"),
        (b"{}", "", "false", "pipeline"),
        (b"{}", "abc", "false", "pipeline"),
        (b"{}", "0", "false", "pipeline"),
        (b"{}", "9" * 40, "false", "pipeline"),
        (b"{}", "PIPELINE", "maybe", "dry_run"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(people, payments, body, pipeline_value, dry_run, field):
    value = payments.pk if pipeline_value == "PIPELINE" else pipeline_value
    data: dict = {"pipeline": value, "dry_run": dry_run}
    if body is not None:
        data["file"] = SimpleUploadedFile("x.jsonl", body)

    response = api_for(people["foreign"]).post("/api/dlq/import/", data, format="multipart")

    assert response.status_code == 400, response.content
    assert field in response.json()


def test_a_file_too_large_or_too_long_is_refused(people, letters, payments, monkeypatch):
    body = export_jsonl(people["operator"])
    monkeypatch.setattr(imports, "IMPORT_MAX_ROWS", 2)
    too_many = post_import(people["foreign"], body, payments.pk)
    monkeypatch.setattr(imports, "IMPORT_MAX_BYTES", 100)
    too_large = post_import(people["foreign"], body, payments.pk)
    announced = post_import(people["foreign"], b"x" * 70_000, payments.pk)

    assert too_many.status_code == 400
    assert "holds more than 2 dead letters" in too_many.json()["file"][0]
    assert too_large.status_code == 400
    assert "is larger than 100 bytes" in too_large.json()["file"][0]
    assert announced.status_code == 400
    assert "is larger than 100 bytes" in announced.json()["file"][0]
    assert not DeadLetter.objects.filter(pipeline=payments).exists()


def test_a_json_nested_too_deep_is_a_bad_line_not_a_server_error(people, payments):
    response = post_import(people["foreign"], b"[" * 5000 + b"]" * 5000, payments.pk)

    assert response.status_code == 400
    assert "line 1: the row is nested deeper than" in response.json()["file"][0]


def test_an_imported_dead_letter_replays_for_its_own_destination_without_its_provenance(
    people, letters, payments
):
    body = export_jsonl(people["operator"])
    ids = post_import(people["foreign"], body, payments.pk).json()["ids"]
    dl = DeadLetter.objects.get(pk=ids[0])
    attempt = SimpleNamespace(
        replay_id=uuid.uuid4(), target_topic=dl.source_topic, destinations="pushes", state="pending", error=""
    )

    record = replay_record(dl, attempt, bytes(dl.value), "fred")

    names = [name for name, _ in record.headers]
    assert not [n for n in names if n.startswith(imports.H_IMPORTED_PREFIX)]
    assert "trace-id" in names
    scope = replay_scope(
        record.headers,
        ["pushes", "pull-requests"],
        payments.current_revision.spec["dlq"]["topic"],
        value=record.value,
        key=django_settings.REPLAY_KEY.encode(),
    )
    assert scope == frozenset({"pushes"})


def test_the_import_page_offers_the_pipelines_the_user_operates(people, pipeline, payments):
    viewer = Client()
    viewer.force_login(people["viewer"])
    operator = Client()
    operator.force_login(people["foreign"])

    as_viewer = viewer.get("/dlq/import/").content.decode()
    as_operator = operator.get("/dlq/import/").content.decode()

    assert 'data-testid="import-none"' in as_viewer
    assert 'data-testid="import-form"' in as_operator
    assert f'<option value="{payments.pk}">{payments.name} (payments)</option>' in as_operator
    assert pipeline.name not in as_operator
    assert "csrfmiddlewaretoken" in as_operator
    assert 'data-api="/api/dlq/import/"' in as_operator


def test_an_imported_dead_letter_s_page_says_it_was_imported(people, letters, payments):
    ids = post_import(people["foreign"], export_jsonl(people["operator"]), payments.pk).json()["ids"]
    client = Client()
    client.force_login(people["foreign"])

    page = client.get(f"/dlq/messages/{ids[0]}/").content.decode()

    assert 'data-testid="imported"' in page
    assert imports.H_IMPORTED_FROM in page


def test_an_admin_of_another_team_needs_no_membership(people, letters, payments):
    admin = member(TeamFactory(name="ops"), Role.ADMIN, username="root2")

    response = post_import(admin, export_jsonl(people["operator"]), payments.pk, dry_run=True)

    assert response.status_code == 200
