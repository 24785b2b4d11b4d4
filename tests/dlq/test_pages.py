"""The DLQ console pages through Django's test client: who sees what and may do what, the list's filters
and keyset pages, the message page, the draft check, groups with runbooks, bulk, approvals, the audit log
and the overview's DLQ backlog. (The real-browser tests in tests/browser/test_dlq_ui.py cover the live and
scripted parts.)"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from access.models import AuditEvent
from dlq import markdown, services
from dlq.models import DeadLetter, PayloadRevision, Status
from dlq.services import bulk as bulk_actions
from pipelines.services import create_pipeline
from tests.dlq.conftest import api_for, github_spec, missing_size_push

pytestmark = pytest.mark.django_db

MUTATION_CONTROLS = (
    'data-testid="replay"',
    'data-testid="skip"',
    'data-testid="request-delete"',
    'data-testid="fix-editor"',
    'id="confirm-dialog"',
)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(type(user).objects.get(pk=user.pk))
    return client


def shown_ids(body: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-id="(\d+)"', body)]


@pytest.fixture
def parked(pipeline, park, github_events):
    """Three dead letters: two JsonPathNotFound (one failure group), one MessageDeserialization."""
    bad = missing_size_push(github_events)
    return park(
        pipeline,
        [
            (b"k1", bad, "JsonPathNotFound", "path /payload/size not found"),
            (b"k2", bad, "JsonPathNotFound", "path /payload/size not found"),
            (b"k3", b"\xff\xfe not json", "MessageDeserialization", "invalid UTF-8 at byte 0"),
        ],
    )


# ------------------------------------------------------------------------------------------ access


@pytest.mark.parametrize(
    "path", ["/dlq/", "/dlq/messages/1/", "/dlq/groups/", "/dlq/bulk/", "/dlq/approvals/", "/audit/"]
)
def test_an_anonymous_visitor_is_sent_to_log_in(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_another_teams_dead_letter_is_a_404_and_absent_from_its_list(people, parked):
    fred = logged_in(people["foreign"])
    assert fred.get(f"/dlq/messages/{parked[0].pk}/").status_code == 404
    assert shown_ids(fred.get("/dlq/").content.decode()) == []
    check = fred.post(
        f"/api/dlq/messages/{parked[0].pk}/check/", {"value": {}}, content_type="application/json"
    )
    assert check.status_code == 404


def test_a_viewer_sees_no_mutation_controls_and_masked_payloads_in_every_tab(people, parked, settings):
    settings.DLQ_MASKED_PATHS = ["/actor"]
    avatar = json.loads(bytes(parked[0].value))["actor"]["avatar_url"]
    body = logged_in(people["viewer"]).get(f"/dlq/messages/{parked[0].pk}/").content.decode()
    for control in MUTATION_CONTROLS:
        assert control not in body
    assert avatar not in body  # neither the pretty nor the raw tab shows it
    raw = re.search(r'data-testid="value-raw"[^>]*>(.*?)</pre>', body, re.S).group(1)
    assert "&quot;actor&quot;:&quot;•••&quot;" in raw
    hex_panel = re.search(r'data-testid="value-hex"[^>]*>(.*?)</pre>', body, re.S).group(1)
    assert "avatars" not in "".join(line.split("|")[1] for line in hex_panel.splitlines() if "|" in line)
    assert "sensitive fields masked" in body

    operator_page = logged_in(people["operator"]).get(f"/dlq/messages/{parked[0].pk}/").content.decode()
    for control in MUTATION_CONTROLS:
        assert control in operator_page
    assert avatar in operator_page


def test_a_viewers_forged_request_with_a_valid_csrf_token_is_refused_with_403(people, parked):
    client = Client(enforce_csrf_checks=True)
    client.force_login(type(people["viewer"]).objects.get(pk=people["viewer"].pk))
    client.get(f"/dlq/messages/{parked[0].pk}/")  # the page sets the CSRF cookie, as for the browser
    token = client.cookies["csrftoken"].value
    for action, body in (("skip", {"reason": "forged"}), ("delete", {"reason": "forged"}), ("replay", {})):
        response = client.post(
            f"/api/dlq/messages/{parked[0].pk}/{action}/",
            json.dumps(body),
            content_type="application/json",
            HTTP_X_CSRFTOKEN=token,
        )
        assert response.status_code == 403, (action, response.content)
    assert DeadLetter.objects.get(pk=parked[0].pk).status == Status.PARKED
    assert not AuditEvent.objects.filter(target_type="dead_letter").exclude(action="dlq.ingest").exists()


def test_a_session_post_without_a_csrf_token_is_refused(people, parked):
    client = Client(enforce_csrf_checks=True)
    client.force_login(type(people["operator"]).objects.get(pk=people["operator"].pk))
    response = client.post(
        f"/api/dlq/messages/{parked[0].pk}/skip/", {"reason": "no token"}, content_type="application/json"
    )
    assert response.status_code == 403
    assert DeadLetter.objects.get(pk=parked[0].pk).status == Status.PARKED


# ------------------------------------------------------------------------------------------ list


def test_the_list_filters_by_pipeline_error_type_status_group_and_text(people, parked, pipeline, park):
    other = create_pipeline(
        actor=people["admin"], name="other-pipe", team=pipeline.team, spec=github_spec("other.src", "o")
    )
    [elsewhere] = park(other, [(b"z9", b"{}", "JsonPathNotFound", "path /x not found")])
    services.skip(actor=people["operator"], dead_letter=parked[1], reason="duplicate")
    now = timezone.now()
    DeadLetter.objects.update(last_failed_at=now - timedelta(minutes=5))
    DeadLetter.objects.filter(pk=parked[0].pk).update(last_failed_at=now - timedelta(hours=3))
    client = logged_in(people["viewer"])
    k1, k2, k3 = (d.pk for d in parked)

    assert shown_ids(client.get("/dlq/").content.decode()) == [elsewhere.pk, k3, k2, k1]
    assert shown_ids(client.get("/dlq/", {"pipeline": pipeline.name}).content.decode()) == [k3, k2, k1]
    assert shown_ids(client.get("/dlq/", {"error_type": "JsonPathNotFound"}).content.decode()) == [
        elsewhere.pk,
        k2,
        k1,
    ]
    assert shown_ids(client.get("/dlq/", {"status": "skipped"}).content.decode()) == [k2]
    assert shown_ids(client.get("/dlq/", {"group": parked[0].group_id}).content.decode()) == [k2, k1]
    assert shown_ids(client.get("/dlq/", {"q": "k3"}).content.decode()) == [k3]  # key prefix
    assert shown_ids(client.get("/dlq/", {"q": "invalid UTF-8"}).content.decode()) == [k3]  # message words
    assert shown_ids(client.get("/dlq/", {"until": "2000-01-01T00:00"}).content.decode()) == []
    assert shown_ids(client.get("/dlq/", {"range": "1h"}).content.decode()) == [elsewhere.pk, k3, k2]
    since = (now - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M")  # a datetime-local value, UTC
    until = (now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    assert shown_ids(client.get("/dlq/", {"since": since, "until": until}).content.decode()) == [k1]

    body = client.get("/dlq/", {"pipeline": pipeline.name}).content.decode()
    counts = dict(re.findall(r'data-status="(\w+)">\w+ <span class="count" data-count>(\d+)<', body))
    assert counts == {
        "all": "3",
        "parked": "2",
        "replaying": "0",
        "replayed": "0",
        "skipped": "1",
        "deleted": "0",
    }


def test_an_invalid_filter_value_is_ignored_and_said_so(people, parked):
    response = logged_in(people["viewer"]).get("/dlq/", {"status": "lost", "since": "yesterday"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "status: must be one of" in body
    assert "since: must be an ISO-8601 time" in body
    assert len(shown_ids(body)) == 3


def test_the_list_pages_newest_first_with_older_and_newer_cursors(people, pipeline, park):
    rows = park(pipeline, [(f"key-{i}".encode(), b"{}", "RetryExhausted", "timed out") for i in range(57)])
    ids = sorted((d.pk for d in rows), reverse=True)
    client = logged_in(people["viewer"])
    first = client.get("/dlq/").content.decode()
    assert shown_ids(first) == ids[:50]
    assert 'data-testid="newer"' not in first
    older_link = re.search(r'href="\?([^"]*before=\d+)" data-testid="older"', first).group(1)
    second = client.get("/dlq/?" + older_link.replace("&amp;", "&")).content.decode()
    assert shown_ids(second) == ids[50:]
    assert 'data-testid="older"' not in second
    newer_link = re.search(r'href="\?([^"]*after=\d+)" data-testid="newer"', second).group(1)
    assert shown_ids(client.get("/dlq/?" + newer_link.replace("&amp;", "&")).content.decode()) == ids[:50]


# ------------------------------------------------------------------------------------------ message page


def test_the_message_page_shows_the_record_failure_history_and_audit_trail(
    people, parked, pipeline, pipeline_topics
):
    dead = parked[0]
    event = json.loads(bytes(dead.value))
    event["payload"]["size"] = 3
    services.fix_payload(
        actor=people["operator"],
        dead_letter=dead,
        value=json.dumps(event).encode(),
        reason="size from commits",
    )
    body = logged_in(people["viewer"]).get(f"/dlq/messages/{dead.pk}/").content.decode()
    assert "JsonPathNotFound" in body
    assert "path /payload/size not found" in body
    source = pipeline.current_revision.spec["source"]["topics"][0]
    assert f"{source}/0/{dead.source_offset}" in body  # source coordinates
    assert f"{dead.dlq_topic}/0/{dead.dlq_offset}" in body  # DLQ coordinates
    assert "x-streamforge-error-type" in body  # the headers table
    assert 'data-testid="failed-revision">r1' in body
    assert "CONSTRUCT:actor=/actor/login:size=/payload/size" in body  # the destination that failed it
    assert 'data-testid="value-hex"' in body
    assert 'class="diff-add">+' in body
    assert "size from commits" in body
    assert "would pass" in body
    assert 'data-action="dlq.fix"' in body


def test_a_binary_payload_opens_on_the_hex_tab(people, parked):
    body = logged_in(people["operator"]).get(f"/dlq/messages/{parked[2].pk}/").content.decode()
    assert 'data-testid="value-tab-pretty"' not in body
    assert re.search(r'class="tab active" data-tab="hex" data-testid="value-tab-hex"', body)
    assert "00000000  ff fe 20 6e 6f 74" in body


def test_the_draft_check_says_whether_it_would_pass_and_stores_nothing(people, parked, pipeline_topics):
    dead = parked[0]
    event = json.loads(bytes(dead.value))
    events_before = AuditEvent.objects.count()
    client = logged_in(people["operator"])
    still_bad = client.post(
        f"/api/dlq/messages/{dead.pk}/check/", {"value": event}, content_type="application/json"
    ).json()
    assert still_bad["check"]["would_pass"] is False
    event["payload"]["size"] = 1
    fixed = client.post(
        f"/api/dlq/messages/{dead.pk}/check/", {"value": event}, content_type="application/json"
    )
    assert fixed.status_code == 200
    answer = fixed.json()
    assert answer["check"]["would_pass"] is True
    # only the destination the replay is for (pushes), not the other one it would be filtered at (#30 item 2)
    assert [(d["destination"], d["outcome"]) for d in answer["check"]["destinations"]] == [
        ("pushes", "produced")
    ]
    assert '+    "size": 1' in answer["diff"]
    assert answer["unchanged"] is False
    assert PayloadRevision.objects.count() == 0
    assert AuditEvent.objects.count() == events_before
    viewer = logged_in(people["viewer"])
    assert (
        viewer.post(
            f"/api/dlq/messages/{dead.pk}/check/", {"value": event}, content_type="application/json"
        ).status_code
        == 403
    )


# ------------------------------------------------------------------------------------------ groups, bulk


def test_groups_show_counts_a_trend_and_runbooks_with_their_actions(people, parked, pipeline):
    group = parked[0].group
    services.save_runbook(
        actor=people["admin"],
        team=pipeline.team,
        title="Missing push size",
        body="## Why\nThe producer drops `size` on **empty** pushes.\n\n- fix it\n- <script>alert(1)</script>",
        actions=["bulk_replay", "fix"],
        group=group,
    )
    operator_page = logged_in(people["operator"]).get("/dlq/groups/").content.decode()
    card = operator_page.split(f'data-group="{group.pk}"')[1].split('class="card group"')[0]
    assert re.search(r'data-field="parked"><a href="[^"]+" data-parked>2</a>', card)
    assert "<polyline points=" in card
    assert "<h4>Why</h4>" in card
    assert "The producer drops <code>size</code> on <strong>empty</strong> pushes." in card
    assert "<script>alert(1)" not in operator_page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in card
    assert f"/dlq/bulk/?group={group.pk}&amp;kind=replay" in card
    assert "runbook-form" not in operator_page  # only admins write runbooks

    viewer_page = logged_in(people["viewer"]).get("/dlq/groups/").content.decode()
    assert "Missing push size" in viewer_page
    assert "/dlq/bulk/?group=" not in viewer_page
    assert "runbook-form" in logged_in(people["admin"]).get("/dlq/groups/").content.decode()


def test_the_bulk_form_is_offered_to_operators_prefilled_from_the_query(people, parked):
    group = parked[0].group_id
    body = logged_in(people["operator"]).get("/dlq/bulk/", {"group": group, "kind": "skip"}).content.decode()
    assert 'data-testid="bulk-form"' in body
    assert f'<option value="{group}" selected>' in body  # the failure-group picker
    assert '<option value="skip" selected>' in body
    assert 'data-testid="bulk-form"' not in logged_in(people["viewer"]).get("/dlq/bulk/").content.decode()


def test_a_bulk_actions_buttons_follow_its_state_and_the_users_role(people, parked, pipeline, monkeypatch):
    from dlq.filters import MessageFilter

    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: None)  # no worker: it stays queued
    bulk = services.create_bulk(
        actor=people["operator"],
        kind="skip",
        selection=MessageFilter(pipeline=pipeline.name),
        reason="cleanup",
    )
    operator_page = logged_in(people["operator"]).get("/dlq/bulk/").content.decode()
    row = operator_page.split(f'data-bulk="{bulk.pk}"')[1]
    assert 'data-testid="bulk-pause"' in row
    assert 'data-testid="bulk-cancel"' in row
    assert 'data-testid="bulk-resume"' not in row
    assert "0 / 3" in row
    assert 'data-testid="bulk-pause"' not in logged_in(people["viewer"]).get("/dlq/bulk/").content.decode()


# ------------------------------------------------------------------------------------------ approvals


def test_only_approvers_other_than_the_requester_are_offered_a_decision(people, parked):
    services.request_delete(actor=people["approver"], dead_letter=parked[0], reason="PII")

    def offered(user) -> bool:
        return 'data-testid="approve"' in logged_in(user).get("/dlq/approvals/").content.decode()

    assert offered(people["approver2"])
    assert offered(people["admin"])
    assert not offered(people["approver"])  # their own request
    assert not offered(people["operator"])
    assert not offered(people["viewer"])
    badge = re.search(
        r'data-testid="pending-approvals"[^>]*>(\d+)<',
        logged_in(people["viewer"]).get("/dlq/").content.decode(),
    )
    assert badge is not None
    assert badge.group(1) == "1"


# ------------------------------------------------------------------------------------------ audit log


@pytest.mark.kafka
@pytest.mark.redis
def test_the_audit_log_is_for_admins_with_filters_and_the_chain_status(
    people, parked, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):  # the anchors are written after commit
        services.skip(actor=people["operator"], dead_letter=parked[2], reason="garbage bytes")
    assert logged_in(people["operator"]).get("/audit/").status_code == 403
    assert 'data-testid="nav-audit"' not in logged_in(people["operator"]).get("/dlq/").content.decode()
    admin = logged_in(people["admin"])
    body = admin.get("/audit/", {"action": "dlq.skip"}).content.decode()
    assert "Chain verified" in body
    assert re.findall(r"<code>(dlq\.\w+|pipeline\.\w+)</code>", body) == ["dlq.skip"]
    assert "garbage bytes" in body

    skip_event = AuditEvent.objects.get(action="dlq.skip")
    with connection.cursor() as cursor:  # what an attacker with database access would do
        cursor.execute(
            "UPDATE access_auditevent SET reason = 'nothing to see' WHERE id = %s", [skip_event.pk]
        )
    body = admin.get("/audit/").content.decode()
    assert f"Chain broken at #{skip_event.sequence}" in body
    assert "content does not match its hash (edited)" in body


# ------------------------------------------------------------------------------------------ overview


def test_the_overview_shows_each_pipelines_parked_backlog_linking_to_its_messages(people, parked, pipeline):
    services.skip(actor=people["operator"], dead_letter=parked[0], reason="duplicate")
    client = logged_in(people["viewer"])
    body = client.get("/").content.decode()
    link = re.search(r'<a href="([^"]+)" data-field="dlq_backlog" data-testid="dlq-backlog" >(\d+)</a>', body)
    assert link is not None, body
    assert link.group(1) == f"/dlq/?pipeline={pipeline.name}&amp;status=parked"
    assert link.group(2) == "2"
    [row] = client.get("/pipelines/overview.json").json()["pipelines"]
    assert row["dlq_backlog"] == 2


# ------------------------------------------------------------------------------------------ markdown


def test_runbook_markdown_escapes_html_and_links_only_safe_urls():
    html = markdown.render(
        "# Title\n"
        'Text with <img src=x onerror="alert(1)"> and [docs](https://example.org/a?b=1&c=2).\n'
        "[bad](javascript:alert(1)) [local](/dlq/groups/)\n\n"
        "1. first `<b>`\n2. second\n\n"
        "```\n<script>x</script>\n```"
    )
    assert "<h3>Title</h3>" in html
    assert "<img" not in html
    assert "&lt;img" in html
    assert (
        '<a href="https://example.org/a?b=1&amp;c=2" rel="noopener noreferrer" target="_blank">docs</a>'
        in html
    )
    assert "[bad](javascript:alert(1))" in html  # left as text
    assert 'href="javascript' not in html
    assert '<a href="/dlq/groups/">local</a>' in html
    assert "<ol>\n<li>first <code>&lt;b&gt;</code></li>\n<li>second</li>\n</ol>" in html
    assert '<pre class="code">&lt;script&gt;x&lt;/script&gt;</pre>' in html


def test_a_pending_delete_holds_replay_and_skip_on_the_server_too(people, parked):
    # The message page disables Replay and Skip while a delete waits for an approver; the API, the same
    # rule: 409 naming the request, the message stays parked, and once the request is rejected both work.
    request = services.request_delete(actor=people["approver"], dead_letter=parked[0], reason="PII")
    api = api_for(people["operator"])
    skipped = api.post(f"/api/dlq/messages/{parked[0].pk}/skip/", {"reason": "noise"}, format="json")
    assert skipped.status_code == 409, skipped.content
    assert f"pending delete request #{request.pk}" in skipped.content.decode()
    replayed = api.post(f"/api/dlq/messages/{parked[0].pk}/replay/", {}, format="json")
    assert replayed.status_code == 409, replayed.content
    parked[0].refresh_from_db()
    assert parked[0].status == "parked"
    services.reject(actor=people["approver2"], approval=request, reason="not PII after all")
    skipped = api.post(f"/api/dlq/messages/{parked[0].pk}/skip/", {"reason": "noise"}, format="json")
    assert skipped.status_code == 200, skipped.content
