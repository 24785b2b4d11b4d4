"""devstack's Keycloak service of the test profile: its ports, and its secrets kept in files, passed on by
path and filled into the realm it imports (no Keycloak is started here)."""

from __future__ import annotations

import stat

from devstack import config, services


def test_the_test_profile_runs_keycloak_on_ports_of_its_own():
    profile = config.profile("test")
    keycloak = next(s for s in services.services(profile) if s.name == "keycloak")
    others = {port for s in services.services(profile) if s.name != "keycloak" for port in s.ports}
    assert keycloak.ports == (profile.web_port + 29, profile.web_port + 30)
    assert not set(keycloak.ports) & others
    assert all(s.name != "keycloak" for s in services.services(config.profile("dev")))


def test_keycloak_secrets_live_in_private_files_and_reach_the_realm_and_env_by_path(tmp_path, monkeypatch):
    profile = config.Profile("sso-test", 1, 2, 3, 4, 5, debug=True, keycloak=True)
    monkeypatch.setattr(config.Profile, "state_dir", property(lambda self: tmp_path / "state"))
    files = services.keycloak_secret_files(profile)
    assert files == services.keycloak_secret_files(profile)  # made once
    secret = files["client"].read_text()
    assert len(secret) >= 32
    assert stat.S_IMODE(files["client"].stat().st_mode) == 0o600
    realm = services.keycloak_realm(profile)
    (client,) = realm["clients"]
    assert client["clientId"] == services.KEYCLOAK_CLIENT_ID
    assert client["secret"] == secret
    assert client["attributes"]["pkce.code.challenge.method"] == "S256"
    env = services.django_env(profile)
    assert env["KEYCLOAK_CLIENT_SECRET_FILE"] == str(files["client"])
    assert secret not in "".join(env.values())
