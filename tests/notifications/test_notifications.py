"""Notifications end to end with real receivers: a signed webhook and an SMTP server hear about a new
failure group; a storm becomes a digest; a receiver that is down gets retries whose failures are rows; the
same event is never sent twice; secrets never leave in clear."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.utils import timezone

from access.models import AuditEvent, Role
from dlq.ingest import TopicOwner, store_batch
from notifications import channels, delivery, dispatch, targets
from notifications.dispatch import Event
from notifications.models import Channel, DeliveryAttempt, Notification, NotificationState
from pipelines.services import create_pipeline
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member
from tests.notifications.conftest import GROUP, failure_records, webhook_channel


@pytest.mark.django_db(transaction=True)
def test_a_new_failure_group_sends_one_signed_webhook_and_one_email_within_10_seconds(
    team, manager, receiver, smtp, inline_delivery
):
    webhook_channel(manager, team, receiver)
    channels.create_channel(
        actor=manager, team=team, name="mail", kind="email", events=[GROUP], recipients=["oncall@example.com"]
    )
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN),
        name="notify-pipe",
        team=team,
        spec=github_spec("notify.events", "notify"),
    )
    owners = {pipeline.current_revision.spec["dlq"]["topic"]: TopicOwner(team.pk, pipeline.pk, pipeline.name)}
    started = time.monotonic()

    store_batch(failure_records(pipeline, 3, distinct=False), owners)

    deadline = started + 10
    while (len(receiver.requests) < 1 or len(smtp.messages) < 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(receiver.requests) == 1
    assert receiver.bad_signatures == 0
    assert receiver.bodies()[0]["event"] == GROUP
    assert len(smtp.messages) == 1
    assert smtp.messages[0][0] == ["oncall@example.com"]
    assert b"New failure group in notify-pipe" in smtp.messages[0][1]
    assert DeliveryAttempt.objects.filter(ok=True).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_thousand_dead_letters_in_a_minute_send_one_notification_and_one_digest(
    team, manager, receiver, inline_delivery
):
    webhook_channel(manager, team, receiver)
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN),
        name="storm-pipe",
        team=team,
        spec=github_spec("storm.events", "storm"),
    )
    owners = {pipeline.current_revision.spec["dlq"]["topic"]: TopicOwner(team.pk, pipeline.pk, pipeline.name)}

    for start in range(0, 1000, 250):
        store_batch(failure_records(pipeline, 250, start=start), owners)  # 1,000 new failure groups

    assert len(receiver.requests) == 1
    assert Notification.objects.filter(state=NotificationState.FOLDED).count() == 999
    digests = dispatch.flush_due_digests(now=timezone.now() + timedelta(seconds=61))
    assert len(digests) == 1
    assert len(receiver.requests) == 2
    assert receiver.bad_signatures == 0
    digest = receiver.bodies()[1]
    assert digest["digest"] is True
    assert digest["count"] == 999
    assert "and 994 more" in digest["text"]
    assert dispatch.flush_due_digests(now=timezone.now() + timedelta(seconds=120)) == []


@pytest.mark.django_db(transaction=True)
def test_the_same_event_is_sent_once_to_a_channel(team, manager, receiver, inline_delivery):
    webhook_channel(manager, team, receiver)
    event = Event(type=GROUP, key="failure_group:42", team_id=team.pk, title="t", text="x")

    dispatch.publish(event)
    dispatch.publish(event)

    assert len(receiver.requests) == 1
    assert Notification.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_is_down_gets_retries_with_backoff_and_each_failure_is_a_row(
    team, manager, closed_port_url, inline_delivery, settings
):
    settings.NOTIFY_MAX_ATTEMPTS = 4
    channels.create_channel(
        actor=manager, team=team, name="down", kind="webhook", events=[GROUP], url=closed_port_url
    )

    dispatch.publish(Event(type=GROUP, key="failure_group:7", team_id=team.pk, title="t", text="x"))
    notification = Notification.objects.get()
    delays = []
    while (result := delivery.attempt(notification.pk)).row is not None:  # what the worker's retries do
        if result.retry_in is not None:
            delays.append(result.retry_in)

    rows = list(DeliveryAttempt.objects.order_by("attempt"))
    assert [r.attempt for r in rows] == [1, 2, 3, 4]
    assert not any(r.ok for r in rows)
    assert all("ConnectionRefusedError" in r.error or "URLError" in r.error for r in rows)
    assert len(delays) == 2  # the first try ran after commit; the worker retried the rest
    assert delays[0] < delays[1]
    assert [delivery.backoff_seconds(n, jitter=False) for n in (1, 2, 3)] == [5, 10, 20]
    notification.refresh_from_db()
    assert notification.state == NotificationState.FAILED
    assert notification.attempts == 4


@pytest.mark.django_db
def test_only_managers_change_channels_and_other_teams_see_nothing(team, manager, receiver):
    viewer = member(team, Role.VIEWER)
    operator = member(team, Role.OPERATOR)
    stranger = member(TeamFactory(name="other-team"), Role.APPROVER)
    channel = webhook_channel(manager, team, receiver)
    as_viewer, as_operator, as_stranger = Client(), Client(), Client()
    as_viewer.force_login(viewer)
    as_operator.force_login(operator)
    as_stranger.force_login(stranger)
    new = {"team": team.name, "name": "x", "kind": "webhook", "events": [GROUP], "url": receiver.url}

    assert as_viewer.get(f"/api/notifications/channels/{channel.pk}/").status_code == 200
    assert (
        as_viewer.post("/api/notifications/channels/", new, content_type="application/json").status_code
        == 403
    )
    assert (
        as_operator.post("/api/notifications/channels/", new, content_type="application/json").status_code
        == 403
    )
    url = f"/api/notifications/channels/{channel.pk}/"
    assert as_viewer.patch(url, {"enabled": False}, content_type="application/json").status_code == 403
    assert as_viewer.delete(url).status_code == 403
    assert as_viewer.post(url + "test/").status_code == 403
    assert as_stranger.get(url).status_code == 404
    assert as_stranger.post(url + "test/").status_code == 404
    assert as_stranger.get("/api/notifications/channels/").json() == []
    assert as_stranger.get("/api/notifications/deliveries/").json()["results"] == []


@pytest.mark.django_db
def test_bad_input_is_a_400_naming_the_field(team, manager):
    client = Client()
    client.force_login(manager)
    base = {"team": team.name, "name": "x", "kind": "webhook", "events": [GROUP]}
    answer = client.post(
        "/api/notifications/channels/", {**base, "url": "ftp://nope"}, content_type="application/json"
    )
    assert answer.status_code == 400
    assert "url" in answer.json()
    answer = client.post(
        "/api/notifications/channels/",
        {**base, "kind": "email", "recipients": ["no"]},
        content_type="application/json",
    )
    assert answer.status_code == 400
    assert "recipients" in answer.json()
    answer = client.post(
        "/api/notifications/channels/", {**base, "events": ["nope"]}, content_type="application/json"
    )
    assert answer.status_code == 400
    assert "events" in answer.json()
    assert client.get("/api/notifications/deliveries/?channel=x").status_code == 400


@pytest.mark.django_db
def test_secrets_are_shown_once_and_never_in_answers_audit_or_logs(team, manager, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    client = Client()
    client.force_login(manager)
    slack_url = f"{receiver.url}/T000/B000/XXXXXXXXXXXXXXXXXXXX"

    made = client.post(
        "/api/notifications/channels/",
        {"team": team.name, "name": "hook", "kind": "webhook", "events": [GROUP], "url": receiver.url},
        content_type="application/json",
    ).json()
    slack = client.post(
        "/api/notifications/channels/",
        {"team": team.name, "name": "slack", "kind": "slack", "events": [GROUP], "slack_url": slack_url},
        content_type="application/json",
    ).json()
    secret = made["signing_secret"]
    assert secret.startswith("whsec_")
    assert slack["signing_secret"] is None

    tested = client.post(f"/api/notifications/channels/{slack['id']}/test/").json()
    assert tested["ok"] is True
    assert receiver.bodies()[0]["text"].startswith("*Test message for slack*")
    shown = client.get("/api/notifications/channels/").content.decode()
    shown += client.get(f"/notifications/{team.name}/").content.decode()
    shown += client.get("/api/notifications/deliveries/").content.decode()
    stored = " ".join(str(v) for v in Channel.objects.values_list("secret_encrypted", flat=True))
    audit = " ".join(
        str(e.details) + str(e.before_digest) + str(e.after_digest) for e in AuditEvent.objects.all()
    )
    for where in (shown, stored, audit, caplog.text):
        assert secret not in where
        assert slack_url not in where
        assert "XXXXXXXXXXXXXXXXXXXX" not in where
    assert "…XXXX" in shown  # masked


@pytest.mark.django_db
def test_a_webhook_may_not_point_at_the_internal_network(team, manager, receiver, settings):
    """SSRF: a team admin's URL must not make the server reach loopback, private or link-local addresses
    (Redis, PostgreSQL, a cloud metadata address), neither when saved nor at delivery, nor by a redirect."""
    client = Client()
    client.force_login(manager)
    base = {"team": team.name, "name": "inside", "kind": "webhook", "events": [GROUP]}
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = False
    for url in (
        "http://127.0.0.1:6379/",
        "http://10.0.0.8/hook",
        "http://169.254.169.254/latest/",
        "http://[::1]/",
    ):
        answer = client.post(
            "/api/notifications/channels/", {**base, "url": url}, content_type="application/json"
        )
        assert answer.status_code == 400, url
        assert "internal address" in answer.json()["url"][0]
    # Saved while allowed, then the installation forbids it: the delivery is refused before connecting.
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = True
    channel = webhook_channel(manager, team, receiver)
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = False
    attempt = channels.send_test(actor=manager, channel=channel)
    assert attempt.status_code is None
    assert "internal address" in attempt.error
    assert receiver.requests == []


def test_a_delivery_does_not_follow_a_redirect():
    """A public receiver could answer 302 to an internal address after the check: the redirect is the
    delivery's error, never a second request."""
    followed: list[str] = []

    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path == "/elsewhere":
                followed.append(self.path)
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        answer = targets.post(url, b"{}", {}, timeout=5, limit=100)
        assert answer.status == 302
        outcome = delivery._post(url, b"{}", {})
        assert not outcome.ok
        assert outcome.error == "HTTP 302 Found"
        assert followed == []
    finally:
        server.shutdown()


@pytest.mark.django_db
def test_the_notifications_link_opens_the_person_s_own_team():
    """``/notifications/`` goes to a team the person is a member of, even when they may see others (an admin
    who is in ``zz-own`` lands there, not on the first team by name)."""
    TeamFactory(name="aa-first")
    admin = member(TeamFactory(name="zz-own"), Role.ADMIN, username="own-team-admin")
    client = Client()
    client.force_login(admin)
    assert client.get("/notifications/")["Location"] == "/notifications/zz-own/"
