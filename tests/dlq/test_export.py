"""Exporting the dead letters a filter selects (``GET /api/dlq/messages/export/``, the list page's Export
menu): CSV and JSON Lines hold exactly the filter's rows of the caller's teams, keys and payloads masked as
the message page masks them, spreadsheet formulas neutralised, one audit event per export."""

from __future__ import annotations

import base64
import csv
import io
import json
import uuid

import pytest
from django.test import Client

from access.models import AuditEvent
from dlq import presenters, services
from dlq.models import DeadLetter
from dlq.services import exports
from pipelines.services import create_pipeline
from tests.dlq.conftest import api_for, github_spec
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db

SECRET = "octocat@example.com"
EVENT = json.dumps({"type": "PushEvent", "actor": {"login": "octocat", "email": SECRET}}).encode()


def download(user, query: str) -> tuple[int, dict[str, str], str]:
    response = api_for(user).get(f"/api/dlq/messages/export/?{query}")
    if response.status_code != 200:
        return response.status_code, dict(response.headers), response.content.decode()
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    return response.status_code, dict(response.headers), body


def csv_rows(user, query: str) -> list[dict[str, str]]:
    status, _, body = download(user, f"as=csv&{query}")
    assert status == 200, body
    return list(csv.DictReader(io.StringIO(body)))


def json_rows(user, query: str) -> list[dict]:
    status, _, body = download(user, f"as=json&{query}")
    assert status == 200, body
    return [json.loads(line) for line in body.splitlines()]


@pytest.fixture
def letters(pipeline, park):
    """Four dead letters of ``pipeline``: two JsonPathNotFound (one of them failed ``pull-requests``), one
    MessageDeserialization that is not JSON, one whose key and error message look like formulas."""
    rows = park(
        pipeline,
        [
            (b"cust-1", EVENT, "JsonPathNotFound", "no /payload/size"),
            (b"cust-2", EVENT, "JsonPathNotFound", "no /payload/size"),
            (b"cust-3", b"not json " + SECRET.encode(), "MessageDeserialization", "Unexpected character"),
            (b"=cmd|' /C calc'!A0", EVENT, "FormulaError", "@SUM(A1:A9)"),
        ],
    )
    DeadLetter.objects.filter(pk=rows[1].pk).update(destination="pull-requests")
    return rows


@pytest.fixture
def foreign_letter(people, park):
    """A dead letter of another team (``payments``), of the same error type as ``letters``' first two."""
    other = TeamFactory(name="payments")
    suffix = uuid.uuid4().hex[:8]
    pipeline = create_pipeline(
        actor=people["admin"],
        name=f"payments-{suffix}",
        team=other,
        spec=github_spec(f"payments.events-{suffix}", suffix),
    )
    return park(pipeline, [(b"card-9", EVENT, "JsonPathNotFound", "no /payload/size")])[0]


def test_a_csv_export_holds_exactly_the_rows_the_filter_selects_newest_first(people, letters):
    rows = csv_rows(people["operator"], "error_type=JsonPathNotFound")

    assert [int(r["id"]) for r in rows] == [letters[1].pk, letters[0].pk]
    first = rows[1]
    dl = letters[0]
    assert first["status"] == "parked"
    assert first["pipeline"] == dl.pipeline_name
    assert first["destination"] == "pushes"
    assert first["error_type"] == "JsonPathNotFound"
    assert first["error_message"] == "no /payload/size"
    assert first["key"] == "cust-1"
    assert first["value"] == EVENT.decode()
    assert first["value_encoding"] == "json"
    assert (first["dlq_topic"], first["dlq_partition"], first["dlq_offset"]) == (
        dl.dlq_topic,
        str(dl.dlq_partition),
        str(dl.dlq_offset),
    )
    assert (first["source_topic"], first["source_partition"], first["source_offset"]) == (
        dl.source_topic,
        str(dl.source_partition),
        str(dl.source_offset),
    )
    assert first["last_failed_at"].endswith("Z")
    assert first["last_failed_at"] == dl.last_failed_at.isoformat().replace("+00:00", "Z")
    assert first["attempts"] == "1"
    assert first["group_id"] == str(dl.group_id)
    assert list(rows[0]) == list(exports.EXPORT_COLUMNS)


def test_the_ids_and_destination_filters_select_exactly_as_on_the_list(people, letters):
    ids = f"{letters[0].pk},{letters[2].pk}"
    assert sorted(int(r["id"]) for r in csv_rows(people["operator"], f"ids={ids}")) == [
        letters[0].pk,
        letters[2].pk,
    ]
    assert [r["id"] for r in json_rows(people["operator"], "destination=pull-requests")] == [letters[1].pk]


def test_a_json_export_is_one_object_a_line_with_the_same_rows_as_the_csv(people, letters):
    query = "error_type=JsonPathNotFound"
    as_json = json_rows(people["operator"], query)
    as_csv = csv_rows(people["operator"], query)

    assert [r["id"] for r in as_json] == [int(r["id"]) for r in as_csv]
    assert as_json[1]["value"] == json.loads(EVENT)
    assert json.loads(as_csv[1]["value"]) == as_json[1]["value"]
    assert json.loads(as_csv[1]["headers"]) == as_json[1]["headers"]
    assert as_json[1]["source_partition"] == 0
    assert set(as_json[0]) == {*exports.JSON_ONLY_COLUMNS, *exports.EXPORT_COLUMNS}
    assert list(as_json[0])[:2] == ["export_format", "masked"]


def test_each_json_line_says_it_is_ours_and_whether_it_was_masked_and_the_csv_does_not(
    people, letters, settings
):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]

    as_operator = json_rows(people["operator"], "")
    as_viewer = json_rows(people["viewer"], "")

    assert {(r["export_format"], r["masked"]) for r in as_operator} == {(exports.EXPORT_FORMAT, False)}
    assert {(r["export_format"], r["masked"]) for r in as_viewer} == {(exports.EXPORT_FORMAT, True)}
    assert "export_format" not in csv_rows(people["viewer"], "")[0]


def test_the_download_is_named_with_the_time_and_carries_its_type(people, letters):
    status, headers, _ = download(people["operator"], "as=json")
    assert status == 200
    assert headers["Content-Type"].startswith("application/x-ndjson")
    assert headers["Content-Disposition"].startswith('attachment; filename="dead-letters-')
    assert headers["Content-Disposition"].endswith('Z.jsonl"')

    status, headers, _ = download(people["operator"], "")
    assert headers["Content-Type"].startswith("text/csv")
    assert headers["Content-Disposition"].endswith('Z.csv"')


def test_a_viewer_s_export_is_masked_exactly_like_the_message_page(people, letters, settings):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    settings.DLQ_MASK_KEYS = True
    viewer = people["viewer"]

    for rows in (csv_rows(viewer, ""), json_rows(viewer, "")):
        assert len(rows) == 4
        for row in rows:
            dl = DeadLetter.objects.select_related("team").get(pk=row["id"])
            masking = services.masking_for(viewer, dl.team)
            page_value = presenters.payload_views(bytes(dl.value), masking=masking)
            page_key = presenters.payload_views(bytes(dl.key), masking=masking, key=True)
            shown = row["value"]
            if not isinstance(shown, str):  # JSON Lines: a JSON payload is the JSON itself
                shown = json.dumps(shown, separators=(",", ":"), ensure_ascii=False)
            assert shown == page_value.raw
            assert row["key"] == page_key.raw
            assert row["key"].startswith("withheld: key, ")
        body = json.dumps(rows)
        assert SECRET not in body
        assert "cust-" not in body

    by_id = {int(r["id"]): r for r in json_rows(viewer, "")}
    assert by_id[letters[0].pk]["value_encoding"] == "json"
    assert by_id[letters[0].pk]["value"]["actor"]["email"] == services.MASK
    assert by_id[letters[2].pk]["value_encoding"] == "withheld"


def test_an_operator_s_export_shows_keys_and_payloads_whole(people, letters, settings):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    settings.DLQ_MASK_KEYS = True

    by_id = {r["id"]: r for r in json_rows(people["operator"], "")}

    assert by_id[letters[0].pk]["key"] == "cust-1"
    assert by_id[letters[0].pk]["value"]["actor"]["email"] == SECRET
    assert by_id[letters[2].pk]["value"] == "not json " + SECRET
    assert by_id[letters[2].pk]["value_encoding"] == "text"


def test_a_json_lines_export_round_trips_numbers_json_payloads_and_headers(people, pipeline, park, settings):
    """Each line read back with ``json.loads`` is the record: numbers as numbers (a 20-digit one exact), a
    JSON payload as the JSON itself (object, string or number, never a string holding it), text as text,
    and the Kafka headers in order, with a masked header masked for a viewer only."""
    settings.DLQ_MASKED_HEADERS = ["Trace-ID"]
    payloads = [
        {"id": 12345678901234567890, "price": 19.25, "ok": True, "tags": ["a", "é"], "none": None},
        "just a JSON string",
        42,
    ]
    rows = park(pipeline, [(b"k", json.dumps(p).encode(), "Boom", "bad /price") for p in payloads])
    rows += park(pipeline, [(b"k", b"plain text", "Boom", "not json")])
    query = "ids=" + ",".join(str(dl.pk) for dl in rows)

    by_id = {r["id"]: r for r in json_rows(people["operator"], query)}
    for dl, payload in zip(rows, payloads, strict=False):
        line = by_id[dl.pk]
        assert line["value"] == payload
        assert line["value_encoding"] == "json"
        assert type(line["source_offset"]) is int
        assert line["source_offset"] == dl.source_offset
        stored = [(n, base64.b64decode(v).decode() if v is not None else None) for n, v in dl.headers]
        assert [(h["name"], h["value"]) for h in line["headers"]] == stored
        assert {h["encoding"] for h in line["headers"]} <= {"text", "null"}
    assert by_id[rows[0].pk]["value"]["id"] == 12345678901234567890
    assert (by_id[rows[3].pk]["value"], by_id[rows[3].pk]["value_encoding"]) == ("plain text", "text")

    viewer_line = json_rows(people["viewer"], f"ids={rows[0].pk}")[0]
    masked = {h["name"]: h for h in viewer_line["headers"]}["trace-id"]
    assert (masked["value"], masked["encoding"]) == (services.MASK, "masked")
    assert "t-1" not in json.dumps(viewer_line["headers"])


def test_the_payload_can_be_left_out(people, letters):
    rows = csv_rows(people["operator"], "include_payload=false")
    assert len(rows) == 4
    assert "value" not in rows[0]
    assert "key" in rows[0]


def test_another_team_s_rows_never_appear_even_when_the_filter_names_them(people, letters, foreign_letter):
    viewer = people["viewer"]
    assert foreign_letter.pk not in [r["id"] for r in json_rows(viewer, "")]
    assert json_rows(viewer, f"ids={foreign_letter.pk}") == []
    assert json_rows(viewer, f"pipeline={foreign_letter.pipeline_name}") == []
    assert json_rows(viewer, f"group={foreign_letter.group_id}") == []
    # the other team's operator sees only their own
    assert [r["id"] for r in json_rows(people["foreign"], "")] == [foreign_letter.pk]


def test_an_unknown_parameter_is_refused_rather_than_ignored(people, letters):
    status, _, body = download(people["viewer"], "team=payments")
    assert status == 400
    assert "team" in json.loads(body)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=bogus", "status"),
        ("ids=1,abc", "ids"),
        ("since=yesterday", "since"),
        ("as=xml", "as"),
        ("include_payload=maybe", "include_payload"),
    ],
)
def test_a_bad_filter_is_a_400_naming_the_field_and_is_not_audited(people, letters, query, field):
    status, _, body = download(people["viewer"], query)

    assert status == 400
    assert field in json.loads(body)
    assert not AuditEvent.objects.filter(action="dlq.export").exists()


def test_more_rows_than_the_cap_is_a_400_asking_to_narrow_the_filter(people, letters, monkeypatch):
    monkeypatch.setattr(exports, "EXPORT_MAX_ROWS", 3)

    status, _, body = download(people["operator"], "")
    assert status == 400
    assert "narrow the filter" in json.loads(body)["filter"][0]
    assert len(csv_rows(people["operator"], "error_type=JsonPathNotFound")) == 2


def test_each_export_is_audited_once_with_its_filter_and_never_a_payload(people, letters, settings):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    csv_rows(people["operator"], f"error_type=JsonPathNotFound&ids={letters[0].pk},{letters[1].pk}")

    events = list(AuditEvent.objects.filter(action="dlq.export"))
    assert len(events) == 1
    event = events[0]
    assert event.actor_name == people["operator"].username
    assert event.details == {
        "filter": {"error_type": "JsonPathNotFound", "ids": [letters[0].pk, letters[1].pk]},
        "format": "csv",
        "include_payload": True,
        "rows": 2,
    }
    assert SECRET not in json.dumps(event.details)
    assert "cust-" not in json.dumps(event.details)


def test_cells_a_spreadsheet_would_run_as_formulas_are_neutralised(people, letters):
    rows = csv_rows(people["operator"], "error_type=FormulaError")

    assert rows[0]["key"] == "'=cmd|' /C calc'!A0"
    assert rows[0]["error_message"] == "'@SUM(A1:A9)"
    # JSON carries the text as it is: a JSON reader runs no formulas
    assert json_rows(people["operator"], "error_type=FormulaError")[0]["key"] == "=cmd|' /C calc'!A0"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("a=b", "a=b"),
        (-1, -1),
    ],
)
def test_safe_cell_prefixes_only_text_that_starts_like_a_formula(value, shown):
    from access.exports import safe_cell

    assert safe_cell(value) == shown


def test_cells_with_commas_quotes_and_newlines_survive_the_round_trip(people, park, pipeline):
    message = 'line one, "quoted"\nline two'
    park(pipeline, [(b"k", EVENT, "Multiline", message)])

    assert csv_rows(people["operator"], "error_type=Multiline")[0]["error_message"] == message


def test_the_list_page_offers_an_export_of_exactly_its_filter(people, letters):
    client = Client()
    client.force_login(people["viewer"])
    page = client.get("/dlq/?error_type=JsonPathNotFound&range=24h&status=bogus").content.decode()

    assert 'data-testid="export-csv"' in page
    link = page.split('data-testid="export-csv"')[0].rsplit('href="', 1)[1].split('"')[0]
    assert link.startswith("/api/dlq/messages/export/?as=csv&amp;error_type=JsonPathNotFound&amp;since=")
    assert "status" not in link  # an invalid value the page ignored is not exported either
    assert 'data-selection-action="export"' in page


def test_anonymous_callers_get_no_export(letters):
    assert Client().get("/api/dlq/messages/export/").status_code in (401, 403)
