"""The demo's notification sinks (``devstack.sinks``): devstack's dev profile starts them and sends the
processes' mail there, and the demo's channels, pointed at them, deliver: a signed webhook and a mail, both
listed on the sinks' page. On loopback only: a real HTTP server and a real SMTP server (aiosmtpd)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from demo import scenario
from devstack import config, services, sinks
from notifications import channels
from notifications.models import Channel


def test_the_dev_profile_starts_the_sinks_and_mails_through_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.PORT_OFFSET_VARIABLE, "700")
    dev = config.profile("dev")
    started = {s.name: s for s in services.services(dev)}
    assert started["sinks"].ports == (dev.web_port + 25, dev.web_port + 26)
    assert started["sinks"].command()[-4:] == [
        "--http-port",
        str(dev.web_port + 25),
        "--smtp-port",
        str(dev.web_port + 26),
    ]
    env = services.django_env(dev)
    assert (env["EMAIL_HOST"], env["EMAIL_PORT"]) == ("127.0.0.1", str(dev.smtp_sink_port))
    assert env["STREAMFORGE_NOTIFY_ALLOW_PRIVATE"] == "true"
    assert "sinks" not in {s.name for s in services.services(config.profile("test"))}


def _get(url: str) -> bytes:
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310  # loopback http only, checked above
        return bytes(answer.read())


@pytest.fixture
def running() -> Iterator[sinks.Sinks]:
    started = sinks.start()
    yield started
    started.stop()


@pytest.mark.django_db
def test_the_demo_s_channels_deliver_to_the_sinks_and_the_page_lists_them(running, settings) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", running.smtp_port
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = True
    people = scenario.setup_people()
    assert scenario.setup_notifications(people, running.url) == ["demo-webhook", "demo-mail"]
    assert scenario.setup_notifications(people, running.url) == ["demo-webhook", "demo-mail"]  # a rerun
    assert Channel.objects.filter(name__in=scenario.DEMO_CHANNELS).count() == 2

    for name in scenario.DEMO_CHANNELS:
        row = channels.send_test(actor=people.admin, channel=Channel.objects.get(name=name))
        assert row.ok, row.error

    received = json.loads(_get(f"{running.url}/received.json"))
    mail, hook = received  # newest first
    assert (hook["kind"], hook["path"], hook["event"], hook["signed"]) == ("webhook", "/hook", "test", True)
    assert hook["body"]["title"] == "Test message for demo-webhook"
    assert (mail["kind"], mail["recipients"]) == ("mail", [scenario.DEMO_RECIPIENT])
    assert "demo-mail" in mail["subject"]
    page = _get(f"{running.url}/").decode()
    assert "test: Test message for demo-webhook" in page
    assert scenario.DEMO_RECIPIENT in page
