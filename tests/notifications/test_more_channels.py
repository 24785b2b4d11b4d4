"""Issue #32, item 6: PagerDuty (Events API v2), Microsoft Teams and Discord channels, end to end against local
stand-ins that check every body against the API's rules (``api_receivers``): a firing DLQ-backlog alert
triggers a PagerDuty incident and its clearing resolves the same one (same ``dedup_key``); 429 and 5xx are
retried (no sooner than a Discord ``retry_after``), a 400 fails at once and is in the delivery log; a storm
is one message and one digest on each; hostile text pings nobody; the routing key and webhook URLs never
leave in clear; wrong roles, other teams and bad input are refused."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from access.models import AuditEvent, Role
from notifications import channels, delivery, dispatch, events, formats, incidents
from notifications.dispatch import Event
from notifications.models import (
    Channel,
    ChannelKind,
    DeliveryAttempt,
    EventType,
    Notification,
    NotificationState,
)
from pipelines import alerts
from pipelines.models import Alert
from tests.factories import TeamFactory, member
from tests.notifications.api_receivers import (
    Answer,
    ApiReceiver,
    api_receiver,
    discord_problems,
    pagerduty_problems,
    teams_problems,
)
from tests.notifications.conftest import GROUP

ROUTING_KEY = "R0ut1ngKeyOfTheTestServ1ce000042"  # 32 letters and digits
CONSOLE = "https://streamforge.example.com"
HOSTILE = (
    "@everyone <@123456789> <#42> **bold** [the runbook](http://evil.example/login) ||spoiler|| `x` ~~s~~"
)
PD_ACCEPTED = Answer(202, {"status": "success", "message": "Event processed"})


@pytest.fixture
def pagerduty() -> Iterator[ApiReceiver]:
    with api_receiver(pagerduty_problems, PD_ACCEPTED) as found:
        yield found


@pytest.fixture
def teams() -> Iterator[ApiReceiver]:
    with api_receiver(teams_problems, Answer(202)) as found:  # a Workflows webhook accepts with 202
        yield found


@pytest.fixture
def discord() -> Iterator[ApiReceiver]:
    with api_receiver(discord_problems, Answer(204)) as found:
        yield found


def pd_channel(manager, team, receiver: ApiReceiver, events_=(GROUP,), name="pager") -> Channel:
    return channels.create_channel(
        actor=manager,
        team=team,
        name=name,
        kind="pagerduty",
        events=list(events_),
        routing_key=ROUTING_KEY,
        url=f"{receiver.url}/v2/enqueue",
        console_url=CONSOLE,
    ).channel


def teams_channel(manager, team, receiver: ApiReceiver, events_=(GROUP,)) -> Channel:
    return channels.create_channel(
        actor=manager,
        team=team,
        name="teams",
        kind="teams",
        events=list(events_),
        teams_url=f"{receiver.url}/workflows/abc/triggers/manual/paths/invoke?sig=TEAMSSIGNATURE0000000",
        console_url=CONSOLE,
    ).channel


def discord_channel(manager, team, receiver: ApiReceiver, events_=(GROUP,)) -> Channel:
    return channels.create_channel(
        actor=manager,
        team=team,
        name="discord",
        kind="discord",
        events=list(events_),
        discord_url=f"{receiver.url}/api/webhooks/1234/DISCORDTOKEN00000000",
        console_url=CONSOLE,
    ).channel


def _event(team, key: str = "failure_group:1", title: str = "New failure group in pipe: Broken", text="x"):
    return Event(type=GROUP, key=key, team_id=team.pk, title=title, text=text, data={"pipeline": "pipe"})


def _settle(notification_id: int) -> list[float | None]:
    """Run the worker's retries in process until the notification is settled; each try's ``retry_in``."""
    waits = []
    while (result := delivery.attempt(notification_id)).row is not None:
        waits.append(result.retry_in)
    return waits


def _all_valid(receiver: ApiReceiver) -> None:
    assert receiver.requests, "nothing was received"
    assert receiver.problems == [[] for _ in receiver.requests], receiver.problems


# -------------------------------------------------------------------------------------------- the checkers


def test_the_stand_ins_refuse_what_the_real_apis_refuse():
    """The checkers can fail: each finds the faults of a broken body (so a wrong shape fails the tests)."""
    good_trigger = {
        "routing_key": ROUTING_KEY,
        "event_action": "trigger",
        "dedup_key": "k",
        "payload": {"summary": "s", "source": "src", "severity": "info"},
    }
    assert pagerduty_problems(good_trigger) == []
    assert pagerduty_problems({**good_trigger, "payload": {**good_trigger["payload"], "summary": "x" * 1025}})
    assert pagerduty_problems({**good_trigger, "payload": {"summary": "s", "severity": "high"}}) == [
        "payload.source is required",
        "payload.severity must be critical, error, warning or info",
    ]
    assert pagerduty_problems({**good_trigger, "event_action": "close", "routing_key": "short"})
    assert pagerduty_problems({**good_trigger, "dedup_key": "k" * 256})
    assert teams_problems({"type": "message", "attachments": [{"contentType": "text/plain", "content": {}}]})
    card = {"type": "AdaptiveCard", "version": "1.2", "body": [{"type": "Image"}]}
    assert len(teams_problems({"type": "message", "attachments": [
        {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
    ]})) == 2  # fmt: skip
    good_discord = {"embeds": [{"title": "t", "description": "d"}], "allowed_mentions": {"parse": []}}
    assert discord_problems(good_discord) == []
    assert discord_problems({**good_discord, "allowed_mentions": {"parse": ["everyone"]}})
    assert discord_problems({**good_discord, "embeds": [{"title": "t" * 257}]})
    fields = [{"name": "n", "value": "v", "inline": True}] * 26
    assert discord_problems({**good_discord, "embeds": [{"title": "t", "fields": fields}]})
    assert discord_problems({**good_discord, "embeds": [{"description": "d" * 4000, "fields": [
        {"name": "n", "value": "v" * 1024}] * 2}]}) == ["an embed's texts are over 6000 characters"]  # fmt: skip


# ------------------------------------------------------------------------------------------------ PagerDuty


@pytest.mark.django_db(transaction=True)
def test_a_firing_alert_triggers_a_pagerduty_incident_and_its_clearing_resolves_the_same_one(
    team, manager, pagerduty, backlogged, inline_delivery
):
    pipeline, now_ms = backlogged
    pd_channel(manager, team, pagerduty, events_=(EventType.ALERT_FIRING, EventType.ALERT_RESOLVED))

    assert [a.rule for a in alerts.evaluate(now_ms=now_ms)] == ["DLQBacklog"]
    alerts.evaluate(now_ms=now_ms + 1000)  # still firing, same figure: no second trigger
    assert alerts.evaluate(now_ms=now_ms + 3600_000) == []  # an hour later the backlog has cleared

    _all_valid(pagerduty)
    trigger, resolve = pagerduty.bodies()
    assert [path for path, _, _ in pagerduty.requests] == ["/v2/enqueue", "/v2/enqueue"]
    assert trigger["event_action"] == "trigger"
    assert resolve == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": trigger["dedup_key"],
    }
    alert = Alert.objects.get(pipeline=pipeline)
    assert trigger["dedup_key"] == f"streamforge/{team.name}/alert:{alert.pk}"
    payload = trigger["payload"]
    assert payload["summary"] == f"DLQBacklog firing on {pipeline.name}"
    assert payload["severity"] == "warning"  # the rule's own
    assert payload["component"] == pipeline.name
    assert payload["group"] == team.name
    assert payload["class"] == EventType.ALERT_FIRING
    assert payload["custom_details"]["rule"] == "DLQBacklog"
    assert "150 records went to the DLQ" in payload["custom_details"]["text"]
    assert trigger["links"] == [
        {"href": f"{CONSOLE}/pipelines/{pipeline.name}/", "text": "Open in StreamForge"}
    ]
    assert list(DeliveryAttempt.objects.order_by("id").values_list("ok", "status_code")) == [
        (True, 202),
        (True, 202),
    ]


@pytest.mark.django_db(transaction=True)
def test_alerts_are_never_folded_into_a_digest_for_pagerduty_but_other_events_are(
    team, manager, pagerduty, backlogged, inline_delivery
):
    """Two alerts firing in the same minute are two incidents, and both resolutions reach PagerDuty (a
    digest could not resolve them); a storm of failure groups is still one trigger and one digest."""
    pipeline, _ = backlogged
    pd_channel(manager, team, pagerduty, events_=(EventType.ALERT_FIRING, EventType.ALERT_RESOLVED, GROUP))
    now = timezone.now()
    two = [
        Alert.objects.create(
            pipeline=pipeline,
            rule=rule,
            severity="critical",
            summary="s",
            value=1.0,
            started_at=now,
            last_seen_at=now,
        )
        for rule in ("HighCommitFailureRate", "ConsumerLagIncreasing")
    ]

    for alert in two:
        dispatch.publish(events.alert_event(alert, firing=True))
    for alert in two:
        dispatch.publish(events.alert_event(alert, firing=False))
    for i in range(20):
        dispatch.publish(_event(team, key=f"failure_group:{i}"))
    assert dispatch.flush_due_digests(now=timezone.now() + timedelta(seconds=61))

    _all_valid(pagerduty)
    bodies = pagerduty.bodies()
    assert [(b["event_action"], b["dedup_key"]) for b in bodies[:4]] == [
        ("trigger", f"streamforge/{team.name}/alert:{two[0].pk}"),
        ("trigger", f"streamforge/{team.name}/alert:{two[1].pk}"),
        ("resolve", f"streamforge/{team.name}/alert:{two[0].pk}"),
        ("resolve", f"streamforge/{team.name}/alert:{two[1].pk}"),
    ]
    assert [b["payload"]["severity"] for b in bodies[:2]] == ["critical", "critical"]
    first, digest = bodies[4:]
    assert first["dedup_key"] == f"streamforge/{team.name}/failure_group:0"
    assert digest["event_action"] == "trigger"
    assert digest["dedup_key"].startswith(f"streamforge/{team.name}/digest:{GROUP}:")
    assert digest["payload"]["summary"] == "19 more: New failure group"
    assert digest["payload"]["custom_details"]["count"] == 19
    assert Notification.objects.filter(state=NotificationState.FOLDED).count() == 19


@pytest.mark.django_db(transaction=True)
def test_pagerduty_429_and_5xx_are_retried_until_202_and_each_try_is_a_row(
    team, manager, pagerduty, inline_delivery
):
    pd_channel(manager, team, pagerduty)
    pagerduty.script = [Answer(429, {"status": "throttle event"}), Answer(502, {"message": "bad gateway"})]

    dispatch.publish(_event(team))
    notification = Notification.objects.get()
    waits = _settle(notification.pk)

    rows = list(DeliveryAttempt.objects.order_by("attempt").values_list("attempt", "ok", "status_code"))
    assert rows == [(1, False, 429), (2, False, 502), (3, True, 202)]
    assert len(waits) == 2
    assert waits[0] is not None
    assert waits[1] is None
    notification.refresh_from_db()
    assert notification.state == NotificationState.SENT
    _all_valid(pagerduty)
    assert len({b["dedup_key"] for b in pagerduty.bodies()}) == 1  # the same event each time


@pytest.mark.django_db(transaction=True)
def test_a_pagerduty_400_fails_at_once_and_the_delivery_log_says_so_without_the_key(
    team, manager, pagerduty, inline_delivery
):
    pd_channel(manager, team, pagerduty)
    pagerduty.script = [
        Answer(400, {"status": "invalid event", "message": f"Event object is invalid for key {ROUTING_KEY}"})
    ]

    dispatch.publish(_event(team))
    notification = Notification.objects.get()

    assert _settle(notification.pk) == []  # the first try after commit was the only one
    row = DeliveryAttempt.objects.get()
    assert (row.ok, row.status_code) == (False, 400)
    assert row.error == "HTTP 400 Bad Request (refused: not retried)"
    assert "invalid event" in row.response_excerpt
    assert ROUTING_KEY not in row.response_excerpt
    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == (NotificationState.FAILED, 1)


@pytest.mark.django_db
def test_a_pagerduty_channel_without_an_endpoint_sends_to_pagerduty(team, manager):
    channel = channels.create_channel(
        actor=manager, team=team, name="pd", kind="pagerduty", events=[GROUP], routing_key=ROUTING_KEY
    ).channel
    assert channel.url == formats.PAGERDUTY_EVENTS_URL == "https://events.pagerduty.com/v2/enqueue"
    assert channel.secret_hint == "…0042"
    assert incidents.incident_key(EventType.ALERT_RESOLVED, "alert:7:resolved") == "alert:7"
    assert incidents.incident_key(GROUP, "failure_group:7") == "failure_group:7"


# ---------------------------------------------------------------------------------------- Teams and Discord


@pytest.mark.django_db(transaction=True)
def test_teams_gets_an_adaptive_card_with_facts_an_open_link_and_escaped_text(
    team, manager, teams, inline_delivery
):
    teams_channel(manager, team, teams)

    dispatch.publish(_event(team, title=f"New failure group in pipe: {HOSTILE}", text=f"{HOSTILE}\n- listed"))

    _all_valid(teams)
    [(path, headers, body)] = teams.requests
    assert path.startswith("/workflows/abc/")
    assert "sig=TEAMSSIGNATURE" in path
    assert headers["content-type"] == "application/json"
    [attachment] = body["attachments"]
    card = attachment["content"]
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    title, text, facts = card["body"]
    assert title["type"] == "TextBlock"
    assert title["weight"] == "Bolder"
    assert r"\[the runbook\]\(http://evil.example/login\)" in text["text"]
    assert r"\*\*bold\*\*" in title["text"]
    assert "\n\\- listed" in text["text"]  # not a list item
    assert {"title": "team", "value": "notify-team"} in facts["facts"]
    assert {"title": "pipeline", "value": "pipe"} in facts["facts"]
    assert card["actions"] == [
        {"type": "Action.OpenUrl", "title": "Open in StreamForge", "url": f"{CONSOLE}/dlq/groups/"}
    ]
    assert DeliveryAttempt.objects.get().status_code == 202


def _unescaped_discord_markup(text: str) -> str:
    """What is left of Discord's markup characters once every backslash-escaped character is removed."""
    return re.sub(r"[^\\*_~`|<>\[\]()@]", "", re.sub(r"\\.", "", text))


@pytest.mark.django_db(transaction=True)
def test_discord_gets_an_embed_within_its_limits_that_pings_nobody_and_shows_hostile_text_as_text(
    team, manager, discord, inline_delivery
):
    discord_channel(manager, team, discord)
    long_reason = HOSTILE + " " + "y" * 9000

    dispatch.publish(
        _event(team, title=f"New failure group in pipe: {HOSTILE}" + "z" * 300, text=long_reason)
    )

    _all_valid(discord)  # lengths, field count, 6000-character total, allowed_mentions
    [body] = discord.bodies()
    assert body["allowed_mentions"] == {"parse": []}
    assert "content" not in body
    [embed] = body["embeds"]
    assert len(embed["title"]) == 256
    assert embed["title"].endswith("…")
    assert len(embed["description"]) == 4096
    assert embed["description"].endswith("…")
    for text in (embed["title"], embed["description"], *(f["value"] for f in embed["fields"])):
        assert _unescaped_discord_markup(text) == "", text
    assert r"\@everyone \<\@123456789\> \<#42\>" in embed["description"]
    assert embed["url"] == f"{CONSOLE}/dlq/groups/"
    assert embed["color"] == formats.COLOURS["warning"]
    assert {"name": "team", "value": "notify-team", "inline": True} in embed["fields"]
    assert DeliveryAttempt.objects.get().status_code == 204


@pytest.mark.django_db(transaction=True)
def test_a_discord_429_is_retried_no_sooner_than_its_retry_after(
    team, manager, discord, inline_delivery, settings
):
    settings.NOTIFY_BACKOFF_SECONDS = 1
    discord_channel(manager, team, discord)
    discord.script = [
        Answer(429, {"message": "You are being rate limited.", "retry_after": 42.5, "global": False})
    ]

    before = timezone.now()
    dispatch.publish(_event(team))
    notification = Notification.objects.get()
    notification.refresh_from_db()

    assert notification.state == NotificationState.RETRYING
    wait = (notification.next_attempt_at - before).total_seconds()
    assert 42.5 <= wait < 50, wait  # not the 1 s backoff
    assert delivery.attempt(notification.pk).row.status_code == 204  # what the worker's retry does
    notification.refresh_from_db()
    assert notification.state == NotificationState.SENT
    row = DeliveryAttempt.objects.get(attempt=1)
    assert (row.status_code, row.error) == (429, "HTTP 429 Too Many Requests")


@pytest.mark.django_db(transaction=True)
def test_a_teams_429_honours_its_retry_after_header_and_a_removed_discord_webhook_fails_at_once(
    team, manager, teams, discord, inline_delivery, settings
):
    settings.NOTIFY_BACKOFF_SECONDS = 1
    teams_channel(manager, team, teams)
    discord_channel(manager, team, discord)
    teams.script = [Answer(429, None, {"Retry-After": "30"})]
    discord.script = [Answer(404, {"message": "Unknown Webhook", "code": 10015})]

    dispatch.publish(_event(team))

    by_kind = {n.channel.kind: n for n in Notification.objects.select_related("channel")}
    assert by_kind["teams"].state == NotificationState.RETRYING
    assert (by_kind["teams"].next_attempt_at - timezone.now()).total_seconds() > 25
    assert by_kind["discord"].state == NotificationState.FAILED
    assert (
        DeliveryAttempt.objects.get(channel__kind="discord").error
        == "HTTP 404 Not Found (refused: not retried)"
    )


@pytest.mark.django_db(transaction=True)
def test_a_storm_is_one_message_and_one_digest_on_pagerduty_teams_and_discord(
    team, manager, pagerduty, teams, discord, inline_delivery
):
    pd_channel(manager, team, pagerduty)
    teams_channel(manager, team, teams)
    discord_channel(manager, team, discord)

    for i in range(200):
        dispatch.publish(
            _event(team, key=f"failure_group:{i}", title=f"New failure group in pipe: Broken{i}")
        )
    assert [len(r.requests) for r in (pagerduty, teams, discord)] == [1, 1, 1]
    assert len(dispatch.flush_due_digests(now=timezone.now() + timedelta(seconds=61))) == 3

    for receiver in (pagerduty, teams, discord):
        _all_valid(receiver)
        assert len(receiver.requests) == 2
    assert pagerduty.bodies()[1]["payload"]["summary"] == "199 more: New failure group"
    teams_digest = teams.bodies()[1]["attachments"][0]["content"]["body"]
    assert teams_digest[0]["text"] == "199 more: New failure group"
    assert "\\- New failure group in pipe: Broken1\n" in teams_digest[1]["text"]
    assert "and 194 more" in teams_digest[1]["text"]
    assert {"title": "events", "value": "199"} in teams_digest[2]["facts"]
    discord_digest = discord.bodies()[1]["embeds"][0]
    assert discord_digest["title"] == "199 more: New failure group"
    assert {"name": "events", "value": "199", "inline": True} in discord_digest["fields"]
    assert DeliveryAttempt.objects.filter(ok=True).count() == 6
    assert Notification.objects.filter(state=NotificationState.FOLDED).count() == 3 * 199


# ------------------------------------------------------------------------------------ secrets, roles, input


@pytest.mark.django_db
def test_the_routing_key_and_webhook_urls_are_never_in_answers_the_page_the_audit_or_logs(
    team, manager, pagerduty, teams, discord, caplog
):
    caplog.set_level(logging.DEBUG)
    client = Client()
    client.force_login(manager)
    teams_url = f"{teams.url}/workflows/abc/triggers/manual/paths/invoke?sig=TEAMSSIGNATURE0000000"
    discord_url = f"{discord.url}/api/webhooks/1234/DISCORDTOKEN00000000"
    made = [
        client.post("/api/notifications/channels/", body, content_type="application/json")
        for body in (
            {"team": team.name, "name": "pd", "kind": "pagerduty", "events": [GROUP], "routing_key": ROUTING_KEY,
             "url": f"{pagerduty.url}/v2/enqueue", "console_url": CONSOLE},
            {"team": team.name, "name": "teams", "kind": "teams", "events": [GROUP], "teams_url": teams_url},
            {"team": team.name, "name": "discord", "kind": "discord", "events": [GROUP], "discord_url": discord_url},
        )
    ]  # fmt: skip
    assert [answer.status_code for answer in made] == [201, 201, 201]
    pd, tm, dc = (answer.json() for answer in made)
    assert (pd["secret_hint"], pd["url"], pd["console_url"]) == (
        "…0042",
        f"{pagerduty.url}/v2/enqueue",
        CONSOLE,
    )
    assert tm["secret_hint"] == f"{teams.url}/…0000"  # scheme and host, then the end of the signature
    assert dc["secret_hint"].endswith("/…0000")
    assert pd["signing_secret"] is None

    pagerduty.script = [Answer(400, {"message": f"Invalid routing key {ROUTING_KEY}"})]
    tested = [client.post(f"/api/notifications/channels/{c['id']}/test/").json() for c in (pd, tm, dc)]
    assert [t["ok"] for t in tested] == [False, True, True]
    assert [t["status_code"] for t in tested] == [400, 202, 204]
    client.patch(
        f"/api/notifications/channels/{pd['id']}/", {"routing_key": "N" * 32}, content_type="application/json"
    )
    assert Channel.objects.get(pk=pd["id"]).secret_hint == "…NNNN"

    shown = client.get("/api/notifications/channels/").content.decode()
    shown += client.get(f"/notifications/{team.name}/").content.decode()
    shown += client.get("/api/notifications/deliveries/").content.decode()
    stored = " ".join(Channel.objects.values_list("secret_encrypted", flat=True))
    rows = " ".join(f"{d.error} {d.response_excerpt}" for d in DeliveryAttempt.objects.all())
    audit = " ".join(
        str(e.details) + str(e.before_digest) + str(e.after_digest) for e in AuditEvent.objects.all()
    )
    assert AuditEvent.objects.filter(action="notification_channel.update").exists()
    for where in (shown, stored, rows, audit, caplog.text):
        for secret in (ROUTING_KEY, "N" * 32, "TEAMSSIGNATURE", "DISCORDTOKEN", "/api/webhooks/1234"):
            assert secret not in where, secret
    assert "…0042" in shown


@pytest.mark.django_db
def test_only_managers_of_the_team_add_or_change_the_new_kinds(team, manager, pagerduty):
    channel = pd_channel(manager, team, pagerduty)
    new = {"team": team.name, "name": "x", "kind": "discord", "events": [GROUP], "discord_url": pagerduty.url}
    url = f"/api/notifications/channels/{channel.pk}/"
    viewer, operator = member(team, Role.VIEWER), member(team, Role.OPERATOR)
    stranger = member(TeamFactory(name="other-team"), Role.APPROVER)
    for person, creates, patches in ((viewer, 403, 403), (operator, 403, 403), (stranger, 400, 404)):
        client = Client()
        client.force_login(person)
        assert (
            client.post("/api/notifications/channels/", new, content_type="application/json").status_code
            == creates
        )
        patched = client.patch(url, {"routing_key": "N" * 32}, content_type="application/json")
        assert patched.status_code == patches
    as_stranger = Client()
    as_stranger.force_login(stranger)
    assert as_stranger.post(url + "test/").status_code == 404
    assert as_stranger.post("/api/notifications/channels/", new, content_type="application/json").json() == {
        "team": ["no such team among yours"]
    }
    assert list(Channel.objects.values_list("name", flat=True)) == ["pager"]
    assert Channel.objects.get().secret_hint == "…0042"


@pytest.mark.django_db
def test_bad_input_for_the_new_kinds_is_a_400_naming_the_field_and_why(team, manager, settings):
    client = Client()
    client.force_login(manager)

    def refused(**fields: object) -> Any:
        body = {"team": team.name, "name": "x", "events": [GROUP], **fields}
        answer = client.post("/api/notifications/channels/", body, content_type="application/json")
        assert answer.status_code == 400, answer.content
        return answer.json()

    assert "32-character integration key" in refused(kind="pagerduty", routing_key="short")["routing_key"][0]
    assert "routing_key" in refused(kind="pagerduty", routing_key="x" * 31 + "!")
    assert "routing_key" in refused(kind="pagerduty")
    assert refused(kind="pagerduty", routing_key=ROUTING_KEY, url="ftp://x")["url"] == [
        "an http:// or https:// URL"
    ]
    assert refused(kind="teams", teams_url="not a url")["teams_url"] == ["an http:// or https:// URL"]
    assert refused(kind="teams")["teams_url"] == ["an http:// or https:// URL"]
    assert refused(kind="discord", discord_url="")["discord_url"] == ["an http:// or https:// URL"]
    assert "console_url" in refused(
        kind="discord", discord_url="https://x.example/", console_url="javascript:alert(1)"
    )
    assert "kind" in refused(kind="opsgenie")
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = False
    for fields in (
        {"kind": "discord", "discord_url": "http://127.0.0.1:6379/api/webhooks/1/t"},
        {"kind": "teams", "teams_url": "http://169.254.169.254/latest/"},
        {"kind": "pagerduty", "routing_key": ROUTING_KEY, "url": "http://[::1]/v2/enqueue"},
    ):
        field = {"discord": "discord_url", "teams": "teams_url", "pagerduty": "url"}[str(fields["kind"])]
        assert "internal address" in refused(**fields)[field][0]
    assert not Channel.objects.exists()


# ---------------------------------------------------------------------------------------------------- page


@pytest.mark.django_db
def test_the_page_offers_the_new_kinds_keeps_a_refused_form_without_its_secret_and_adds_one(
    team, manager, discord
):
    client = Client()
    client.force_login(manager)
    page = client.get(f"/notifications/{team.name}/").content.decode()
    for kind in (ChannelKind.PAGERDUTY, ChannelKind.TEAMS, ChannelKind.DISCORD):
        assert f'<option value="{kind.value}">{kind.label}</option>' in page
    for field in ('name="routing_key"', 'name="pagerduty_url"', 'name="teams_url"', 'name="discord_url"',
                  'name="console_url"', "Events API V2", "Workflows"):  # fmt: skip
        assert field in page, field

    form = {"name": "pd", "kind": "pagerduty", "events": [GROUP], "routing_key": ROUTING_KEY,
            "pagerduty_url": "ftp://nope", "console_url": CONSOLE}  # fmt: skip
    answer = client.post(f"/notifications/{team.name}/channels", form)
    html = answer.content.decode()
    assert answer.status_code == 400
    assert "Not added: pagerduty_url: an http:// or https:// URL" in html
    assert 'value="ftp://nope" aria-invalid="true"' in html
    assert 'data-testid="routing_key-retype"' in html
    assert ROUTING_KEY not in html

    discord_url = f"{discord.url}/api/webhooks/9/DISCORDTOKEN00000000"
    form = {
        "name": "dc",
        "kind": "discord",
        "events": [GROUP],
        "discord_url": discord_url,
        "console_url": CONSOLE,
    }
    assert client.post(f"/notifications/{team.name}/channels", form).status_code == 302
    channel = Channel.objects.get(name="dc")
    assert (channel.kind, channel.console_url) == ("discord", CONSOLE)
    page = client.get(f"/notifications/{team.name}/").content.decode()
    assert "DISCORDTOKEN" not in page
    assert "/…0000" in page
    edited = client.post(
        f"/notifications/channels/{channel.pk}/edit", {"events": [GROUP], "enabled": "on", "console_url": ""}
    )
    assert edited.status_code == 302
    channel.refresh_from_db()
    assert channel.console_url == ""
