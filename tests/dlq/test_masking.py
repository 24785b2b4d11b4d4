"""What a masked viewer may not see. Masked JSON paths cannot be found in a payload that is not JSON
(truncated JSON, another encoding: most dead letters), so while any path is masked such a payload is
withheld whole, with its length and hash, on every surface: the API, the page's raw and hex tabs, fixes and
their diffs, ``manage.py dlq show``. Headers and keys are masked when configured."""

from __future__ import annotations

import hashlib
import io
import json
import re

import pytest
from django.core.management import call_command
from django.test import Client

from dlq import services
from tests.dlq.conftest import api_for

pytestmark = pytest.mark.django_db

SECRET = "octocat@example.com"
TRUNCATED = ('{"actor": {"login": "octocat", "email": "' + SECRET + '", "id": 58').encode()
NOT_UTF8 = b"\xff\xfe" + ('{"actor": {"email": "' + SECRET + '"}}').encode()


def withheld(data: bytes) -> str:
    return f"withheld: not JSON, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"


def page_of(user, pk: int) -> str:
    client = Client()
    client.force_login(type(user).objects.get(pk=user.pk))
    return client.get(f"/dlq/messages/{pk}/").content.decode()


def panel(page: str, name: str) -> str:
    found = re.search(rf'data-testid="{name}"[^>]*>(.*?)</pre>', page, re.S)
    assert found is not None, name
    return found.group(1)


@pytest.fixture
def unparsable(pipeline, park):
    """A truncated-JSON and an invalid-UTF-8 dead letter carrying the secret."""
    return park(
        pipeline,
        [
            (b"cust-4711", TRUNCATED, "MessageDeserialization", "Unterminated string"),
            (b"cust-4712", NOT_UTF8, "MessageDeserialization", "invalid UTF-8 at byte 0"),
        ],
    )


@pytest.mark.parametrize("which", [0, 1], ids=["truncated-json", "invalid-utf8"])
def test_a_viewer_gets_a_payload_that_is_not_json_withheld_with_its_length_and_hash(
    people, unparsable, settings, which
):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    row = unparsable[which]
    data = bytes(row.value)

    response = api_for(people["viewer"]).get(f"/api/dlq/messages/{row.pk}/")
    assert response.json()["value"] == {"encoding": "withheld", "text": withheld(data), "size": len(data)}
    assert SECRET not in response.content.decode()

    page = page_of(people["viewer"], row.pk)
    assert SECRET not in page
    assert panel(page, "value-raw") == withheld(data)
    assert panel(page, "value-hex") == withheld(data)
    assert "6f 63 74 6f" not in page  # "octo" in the hex dump
    assert 'data-testid="value-withheld"' in page

    shown = io.StringIO()
    call_command("dlq", "show", str(row.pk), "--as", people["viewer"].username, stdout=shown)
    assert SECRET not in shown.getvalue()
    assert json.loads(shown.getvalue())["value"]["text"] == withheld(data)


def test_an_operator_still_sees_a_payload_that_is_not_json(people, unparsable, settings):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    body = api_for(people["operator"]).get(f"/api/dlq/messages/{unparsable[0].pk}/").json()
    assert body["value"]["encoding"] == "text"
    assert SECRET in body["value"]["text"]
    assert SECRET in page_of(people["operator"], unparsable[0].pk)
    binary = api_for(people["operator"]).get(f"/api/dlq/messages/{unparsable[1].pk}/").json()
    assert binary["value"]["encoding"] == "hex"


def test_a_fix_of_a_payload_that_is_not_json_is_withheld_from_viewers_in_its_value_and_diff(
    people, unparsable, settings
):
    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    row = unparsable[0]
    fixed = TRUNCATED + b', "more": "' + SECRET.encode() + b'"'  # still not JSON
    services.fix_payload(actor=people["operator"], dead_letter=row, value=fixed, reason="closer")

    body = api_for(people["viewer"]).get(f"/api/dlq/messages/{row.pk}/").json()
    [revision] = body["payload_revisions"]
    assert revision["value"]["text"] == withheld(fixed)
    assert SECRET not in revision["diff"]
    assert f"-{withheld(bytes(row.value))}" in revision["diff"]
    assert f"+{withheld(fixed)}" in revision["diff"]
    assert SECRET not in json.dumps(body)
    assert SECRET not in page_of(people["viewer"], row.pk)
    # The operator's history shows the real diff.
    operator = api_for(people["operator"]).get(f"/api/dlq/messages/{row.pk}/").json()
    assert SECRET in operator["payload_revisions"][0]["diff"]


def test_masked_headers_and_keys_are_hidden_from_viewers_in_the_detail_list_and_search(
    people, unparsable, settings
):
    settings.DLQ_MASKED_HEADERS = ["Trace-ID"]
    settings.DLQ_MASK_KEYS = True
    row = unparsable[0]
    viewer, operator = api_for(people["viewer"]), api_for(people["operator"])

    body = viewer.get(f"/api/dlq/messages/{row.pk}/").json()
    assert {"name": "trace-id", "encoding": "masked", "value": services.MASK} in body["headers"]
    assert body["key"] == {"encoding": "withheld", "text": "withheld: key, 9 bytes", "size": 9}
    listed = viewer.get("/api/dlq/messages/").json()["results"]
    assert {r["key_text"] for r in listed} == {services.MASK}
    assert viewer.get("/api/dlq/messages/", {"q": "cust-47"}).json()["results"] == []
    page = page_of(people["viewer"], row.pk)
    assert "cust-4711" not in page
    assert "t-1" not in panel_free(page)
    client = Client()
    client.force_login(type(people["viewer"]).objects.get(pk=people["viewer"].pk))
    assert "cust-47" not in client.get("/dlq/").content.decode()

    seen = operator.get(f"/api/dlq/messages/{row.pk}/").json()
    assert {"name": "trace-id", "encoding": "text", "value": "t-1"} in seen["headers"]
    assert seen["key"]["text"] == "cust-4711"
    assert len(operator.get("/api/dlq/messages/", {"q": "cust-47"}).json()["results"]) == 2


def panel_free(page: str) -> str:
    """The headers table of the page (where a header's value would show)."""
    found = re.search(r'data-testid="headers"(.*?)</table>', page, re.S)
    assert found is not None
    return found.group(1)
