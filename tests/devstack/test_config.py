"""devstack's profiles: a port offset gives a checkout a private stack beside another one's."""

from __future__ import annotations

import pytest

from devstack import config


def test_without_an_offset_the_profile_is_the_table_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(config.PORT_OFFSET_VARIABLE, raising=False)
    assert config.profile("test") is config.PROFILES["test"]


def test_an_offset_moves_every_port_and_the_state_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.PORT_OFFSET_VARIABLE, "300")
    base, shifted = config.PROFILES["test"], config.profile("test")
    assert shifted.name == "test-300"
    assert (shifted.kafka_port, shifted.controller_port, shifted.redis_port) == (
        base.kafka_port + 300, base.controller_port + 300, base.redis_port + 300,
    )  # fmt: skip
    assert (shifted.web_port, shifted.postgres_port) == (base.web_port + 300, base.postgres_port + 300)
    assert shifted.state_dir != base.state_dir
    assert shifted.postgres_dir != base.postgres_dir
    assert shifted.durable is base.durable is False
    assert shifted.registry_port == base.registry_port + 300
    assert shifted.schema_registry_url == f"http://127.0.0.1:{base.registry_port + 300}/apis/ccompat/v7"


@pytest.mark.parametrize("raw", ["abc", "-5", "10000"])
def test_a_bad_offset_is_refused_with_its_value(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(config.PORT_OFFSET_VARIABLE, raw)
    with pytest.raises(ValueError, match=config.PORT_OFFSET_VARIABLE):
        config.profile("test")


@pytest.mark.parametrize(
    ("name", "runs_one"), [("dev", True), ("test", True), ("chaos", False), ("cluster", False)]
)
def test_the_schema_registry_runs_where_something_reads_schemas(name: str, runs_one: bool) -> None:
    from devstack import services

    profile = config.PROFILES[name]
    assert ("registry" in [s.name for s in services.services(profile)]) is runs_one
    assert ("SCHEMA_REGISTRY_URL" in services.django_env(profile)) is runs_one
    assert "registry" in [s.name for s in services.services(profile, every=True)]  # `down` stops any left
