"""The strict environment helpers refuse what they cannot parse instead of guessing."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from streamforge_web.env import env_bool, env_int, env_list, env_str


def test_env_bool_accepts_the_usual_spellings(monkeypatch):
    for text, expected in [("true", True), ("ON", True), ("1", True), ("no", False), ("False", False)]:
        monkeypatch.setenv("SF_FLAG", text)
        assert env_bool("SF_FLAG", default=not expected) is expected


def test_env_bool_refuses_a_typo_naming_the_variable(monkeypatch):
    monkeypatch.setenv("SF_FLAG", "ture")
    with pytest.raises(ImproperlyConfigured, match="SF_FLAG"):
        env_bool("SF_FLAG", default=False)


def test_an_unset_or_empty_variable_gives_the_default(monkeypatch):
    monkeypatch.delenv("SF_NUM", raising=False)
    assert env_int("SF_NUM", 7) == 7
    monkeypatch.setenv("SF_NUM", "")
    assert env_int("SF_NUM", 7) == 7


def test_env_int_refuses_text_and_values_below_the_minimum(monkeypatch):
    monkeypatch.setenv("SF_NUM", "12x")
    with pytest.raises(ImproperlyConfigured, match="integer"):
        env_int("SF_NUM", 1)
    monkeypatch.setenv("SF_NUM", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("SF_NUM", 1, minimum=1)


def test_env_str_without_default_requires_the_variable(monkeypatch):
    monkeypatch.delenv("SF_SECRET", raising=False)
    with pytest.raises(ImproperlyConfigured, match="SF_SECRET must be set"):
        env_str("SF_SECRET")


def test_env_list_splits_on_commas_and_drops_blanks(monkeypatch):
    monkeypatch.setenv("SF_HOSTS", " a.example, b.example,, ")
    assert env_list("SF_HOSTS", []) == ["a.example", "b.example"]
