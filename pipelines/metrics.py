"""``/metrics``: the spec's Prometheus metrics, read from the database at scrape time.

A custom collector, not in-process counters: any web process answers with the same numbers, and they
survive restarts. Counters come from ``PipelineTotals`` (never decreasing, unlike samples under retention);
``streamforge_consumer_lag`` from ``PartitionProgress`` (each partition's lag after the last batch that read
it). Every metric is labelled by ``pipeline`` and by ``cluster``, the Kafka cluster it runs on (``default`` for
the installation's ``KAFKA_*`` one), so one scrape spans every cluster and a dashboard can split by it.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from access.permissions import is_admin
from pipelines.models import DEFAULT_CLUSTER_NAME, PartitionProgress, Pipeline, PipelineTotals


class PipelineCollector(Collector):
    """Yields the StreamForge metric families for every pipeline, from the database."""

    def collect(self) -> Iterator[Metric]:
        """One scrape: a handful of queries, independent of the number of samples stored."""
        consumed = CounterMetricFamily(
            "streamforge_messages_consumed",
            "Records read from the source topics",
            labels=["pipeline", "cluster"],
        )
        produced = CounterMetricFamily(
            "streamforge_messages_produced",
            "Records written to destination topics (summed over destinations)",
            labels=["pipeline", "cluster"],
        )
        commits = CounterMetricFamily(
            "streamforge_commits", "Batch offset commits by result", labels=["pipeline", "cluster", "result"]
        )
        retries = CounterMetricFamily(
            "streamforge_retries", "Write retries (destination and DLQ)", labels=["pipeline", "cluster"]
        )
        dlq = CounterMetricFamily(
            "streamforge_dlq_messages", "Records written to the DLQ topic", labels=["pipeline", "cluster"]
        )
        lag = GaugeMetricFamily(
            "streamforge_consumer_lag",
            "Records in a source partition not yet processed (latest - processed offset)",
            labels=["pipeline", "cluster", "topic", "partition"],
        )
        labels = {
            pk: [name, cluster or DEFAULT_CLUSTER_NAME]
            for pk, name, cluster in Pipeline.objects.values_list("pk", "name", "cluster__name")
        }
        for totals in PipelineTotals.objects.all():
            of = labels.get(totals.pipeline_id)
            if of is None:
                continue
            consumed.add_metric(of, totals.consumed)
            produced.add_metric(of, totals.produced)
            commits.add_metric([*of, "success"], totals.commits_succeeded)
            commits.add_metric([*of, "failure"], totals.commits_failed)
            retries.add_metric(of, totals.retries)
            dlq.add_metric(of, totals.dlq_records)
        for row in PartitionProgress.objects.all():
            of = labels.get(row.pipeline_id)
            if of is not None:
                lag.add_metric([*of, row.topic, str(row.partition)], row.lag)
        yield from (consumed, produced, commits, retries, dlq, lag)


def render() -> bytes:
    """The Prometheus text exposition of the pipeline metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector())
    return generate_latest(registry)


def may_scrape(request: HttpRequest) -> bool:
    """Whether the caller may read every team's pipeline metrics. With ``STREAMFORGE_METRICS_TOKEN`` set,
    only ``Authorization: Bearer <token>`` (compared in constant time) opens them; without one, only a
    signed-in admin: the names of every team's pipelines and their volumes are not for anonymous callers."""
    token = str(settings.METRICS_TOKEN)
    if not token:
        return bool(request.user.is_authenticated and is_admin(request.user))
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: Prometheus text format for a caller ``may_scrape`` lets in; 401 otherwise (with
    ``WWW-Authenticate: Bearer`` so a scraper's log says what is missing)."""
    if not may_scrape(request):
        response = HttpResponse("metrics need a bearer token or an admin's session\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(render(), content_type=CONTENT_TYPE_LATEST)
