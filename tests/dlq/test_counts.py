"""The trigger-kept dead-letter counts (``dlq.counts``): equal to counting the rows after inserts through
ingest, saves, bulk updates and deletes, on PostgreSQL (statement triggers) and SQLite (row triggers);
rolled back with their transaction; unchanged by compaction, also when compactions and writers run at once
on PostgreSQL; and what the console's status tabs, the groups' parked counts and the overview's backlog read.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.db.models import Count

from access.models import AuditEvent
from dlq import counts, services
from dlq.filters import MessageFilter
from dlq.models import DeadLetter, FailureGroup, Status, StatusCount
from dlq.selectors import parked_backlog, status_counts, with_parked_counts

Key = tuple[int, int | None, int | None, str]


def _truth() -> Counter[Key]:
    return Counter(
        {
            (g, p, c, s): n
            for g, p, c, s, n in DeadLetter.objects.order_by()
            .values_list("group_id", "pipeline_id", "cluster_id", "status")
            .annotate(n=Count("id"))
        }
    )


def _kept() -> Counter[Key]:
    kept: Counter[Key] = Counter()
    for row in StatusCount.objects.all():
        kept[(row.group_id, row.pipeline_id, row.cluster_id, row.status)] += row.n
    return +kept  # drop the keys that sum to zero


def _exercise(park, pipeline) -> None:
    rows = park(pipeline, [(b"k", b"{}", "Deserialization", f"bad {i % 3}") for i in range(30)])
    rows += park(pipeline, [(b"k", b"{}", "TransformEvaluation", "no /size") for _ in range(12)])
    assert _kept() == _truth()

    first = rows[0]
    first.status = Status.SKIPPED
    first.save(update_fields=["status"])  # one row through the ORM
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows[1:11]]).update(status=Status.REPLAYED)  # a statement
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows[11:14]]).update(error_message="same status")
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows[14:18]]).delete()
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows[18:20]]).update(pipeline=None)
    assert _kept() == _truth()
    assert _truth()[(first.group_id, pipeline.pk, None, Status.SKIPPED)] == 1


def _compare_compacted() -> None:
    before = _truth()
    removed = counts.compact()
    assert removed > 0
    assert _kept() == before
    assert StatusCount.objects.count() == len(before)  # one row per key
    assert counts.compact() == 0  # nothing more to fold


@pytest.mark.django_db
def test_counts_follow_every_change_and_survive_compaction(park, pipeline):
    _exercise(park, pipeline)
    _compare_compacted()


@pytest.mark.sqlite
@pytest.mark.django_db
def test_counts_follow_every_change_on_sqlite(park, pipeline):
    _exercise(park, pipeline)
    _compare_compacted()


@pytest.mark.django_db
def test_a_rolled_back_change_takes_its_deltas_with_it(park, pipeline):
    rows = park(pipeline, [(b"k", b"{}", "Deserialization", "bad") for _ in range(5)])
    before = _kept()
    with transaction.atomic():
        DeadLetter.objects.filter(pk__in=[r.pk for r in rows]).update(status=Status.SKIPPED)
        transaction.set_rollback(True)  # the operator's action failed after the update
    assert _kept() == before == _truth()


@pytest.mark.django_db
def test_console_counts_match_counting_the_rows_under_each_filter(park, pipeline, people):
    rows = park(pipeline, [(b"k", b"{}", "Deserialization", "bad") for _ in range(6)])
    rows += park(pipeline, [(b"k", b"{}", "TransformEvaluation", "no /size") for _ in range(4)])
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows[:3]]).update(status=Status.REPLAYED)
    group = rows[-1].group_id
    since = "2000-01-01T00:00:00Z"  # a time bound takes the path that counts rows
    selections = [
        {},
        {"pipeline": pipeline.name},
        {"error_type": "TransformEvaluation"},
        {"group": group},
        {"topic": rows[0].dlq_topic},
        {"cluster": "default"},
        {"cluster": "no-such-cluster"},
        {"pipeline": "another-pipeline"},
    ]
    for who in ("operator", "admin", "foreign"):
        for selection in selections:
            fast = status_counts(people[who], MessageFilter(**selection))
            counted = status_counts(people[who], MessageFilter(**selection, since=since))
            assert fast == counted, (who, selection)
    assert status_counts(people["operator"], MessageFilter())[Status.PARKED] == 7
    assert status_counts(people["foreign"], MessageFilter())[Status.PARKED] == 0

    assert parked_backlog([pipeline.pk]) == {pipeline.pk: 7}
    parked = dict(with_parked_counts(FailureGroup.objects.all()).values_list("pk", "parked"))
    assert parked[group] == 4
    assert sum(parked.values()) == 7


@pytest.mark.django_db(transaction=True)
def test_compactions_beside_writers_neither_lose_nor_double_a_delta(park, pipeline):
    """Two compactors and a writer at once, each on its own PostgreSQL connection. The guard: a compactor
    folds exactly the rows its own DELETE removed (``RETURNING``); folding rows it had merely read would
    count a delta twice when the other compactor folded it too."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs one writer at a time")
    rows = park(pipeline, [(b"k", b"{}", "Deserialization", "bad") for _ in range(40)])
    ids = [r.pk for r in rows]
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def compactor() -> None:
        try:
            start.wait(timeout=10)
            for _ in range(25):
                counts.compact()
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connections.close_all()

    def writer() -> None:
        try:
            start.wait(timeout=10)
            for i in range(25):
                status = Status.SKIPPED if i % 2 else Status.PARKED
                DeadLetter.objects.filter(pk__in=ids[i % 20 : i % 20 + 20]).update(status=status)
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=compactor),
        threading.Thread(target=compactor),
        threading.Thread(target=writer),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a compactor or the writer is stuck (deadlock?)"
    assert not errors, errors
    assert _kept() == _truth()


@pytest.mark.django_db
def test_recount_names_a_wrong_count_and_an_admin_rebuilds_it_audited(park, pipeline, people):
    rows = park(pipeline, [(b"k", b"{}", "Deserialization", "bad") for _ in range(3)])
    assert counts.differences() == []
    # A count gone wrong (e.g. a database restored without the triggers): one parked row too many.
    StatusCount.objects.create(
        group_id=rows[0].group_id, pipeline_id=pipeline.pk, cluster_id=None, status=Status.PARKED, n=1
    )
    with pytest.raises(PermissionDenied):
        services.recount(actor=people["operator"], fix=True)
    checked = services.recount(actor=people["admin"])
    assert checked.differences == [
        {
            "group_id": rows[0].group_id,
            "pipeline_id": pipeline.pk,
            "cluster_id": None,
            "status": Status.PARKED,
            "kept": 4,
            "counted": 3,
        }
    ]
    assert not checked.rebuilt
    assert AuditEvent.objects.filter(action="dlq.recount").count() == 0

    fixed = services.recount(actor=people["admin"], fix=True)
    assert fixed.rebuilt
    assert counts.differences() == []
    assert _kept() == _truth()
    event = AuditEvent.objects.get(action="dlq.recount")
    assert event.actor == people["admin"]
    assert event.details["wrong_keys"] == 1


@pytest.mark.django_db
def test_the_recount_command_exits_1_on_a_difference_and_fixes_it(park, pipeline, people, capsys):
    rows = park(pipeline, [(b"k", b"{}", "Deserialization", "bad")])
    StatusCount.objects.create(
        group_id=rows[0].group_id, pipeline_id=None, cluster_id=None, status="parked", n=2
    )
    with pytest.raises(SystemExit) as exited:
        call_command("dlq", "recount", "--as", people["admin"].username)
    assert exited.value.code == 1
    assert "differ from the rows" in capsys.readouterr().err
    call_command("dlq", "recount", "--as", people["admin"].username, "--fix")
    assert json.loads(capsys.readouterr().out)["rebuilt"] is True
    assert counts.differences() == []
