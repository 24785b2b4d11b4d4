"""Importing an export from the ``/dlq/import/`` page in a real Chromium: the check is a dry run that writes
nothing, only then is Import offered, and it parks the rows in the chosen pipeline; a file that is not ours
is refused with its line number. The rules themselves are tested in tests/dlq/test_import.py."""

from __future__ import annotations

import json
import uuid

import pytest

from access.models import Role
from dlq.filters import MessageFilter
from dlq.models import DeadLetter, Status
from dlq.services.exports import export_dead_letters
from pipelines.services import create_pipeline
from tests.browser.test_dlq_ui import store
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

EVENT = json.dumps({"type": "PushEvent", "actor": {"login": "octocat"}}).encode()


def test_an_operator_checks_an_export_then_imports_it_into_their_pipeline(open_page):
    source_team = TeamFactory(name="data-platform")
    exporter = member(source_team, Role.OPERATOR, username="olga")
    admin = member(source_team, Role.ADMIN, username="ada")
    suffix = uuid.uuid4().hex[:8]
    source = f"github.events-{suffix}"
    origin = create_pipeline(
        actor=admin, name=f"github-{suffix}", team=source_team, spec=github_spec(source, suffix)
    )
    store(origin, [(f"k-{i}".encode(), EVENT, "JsonPathNotFound", "no /payload/size") for i in range(2)])
    export = export_dead_letters(actor=exporter, selection=MessageFilter.from_mapping({}), fmt="json")
    body = "".join(export.chunks).encode()
    payments = TeamFactory(name="payments")
    importer = member(payments, Role.OPERATOR, username="fred")
    spec = github_spec(source, f"{suffix}r")
    spec["dlq"] = {"topic": f"repro-{suffix}.dlq"}
    target = create_pipeline(actor=admin, name=f"repro-{suffix}", team=payments, spec=spec)

    page = open_page(importer)
    page.goto("/dlq/import/")
    page.get_by_test_id("import-pipeline").select_option(str(target.pk))
    page.get_by_test_id("import-file").set_input_files(
        {"name": "broken.jsonl", "mimeType": "application/x-ndjson", "buffer": body + b"not json\n"}
    )
    page.get_by_test_id("import-check").click()
    page.get_by_test_id("import-error").wait_for()
    assert "line 3: not JSON" in page.get_by_test_id("import-outcome").inner_text()
    assert page.get_by_test_id("import-confirm").is_disabled()

    page.get_by_test_id("import-file").set_input_files(
        {"name": "export.jsonl", "mimeType": "application/x-ndjson", "buffer": body}
    )
    page.get_by_test_id("import-check").click()
    page.get_by_test_id("import-preview").wait_for()
    assert "2 would be imported" in page.get_by_test_id("import-preview").inner_text()
    assert not DeadLetter.objects.filter(pipeline=target).exists()

    page.get_by_test_id("import-confirm").click()
    page.get_by_test_id("import-done").wait_for()
    rows = list(DeadLetter.objects.filter(pipeline=target))
    assert len(rows) == 2
    assert {(dl.team_id, dl.status) for dl in rows} == {(payments.pk, Status.PARKED)}
    page.get_by_test_id("import-list-link").click()
    page.wait_for_url(f"**/dlq/?pipeline={target.name}&status=parked")
