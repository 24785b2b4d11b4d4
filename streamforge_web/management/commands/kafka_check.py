"""``manage.py kafka_check``: test a Kafka cluster's connection (default: the installation's), as a pipeline's
driver will use it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from pipelines.clusters import connection_for
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster, Pipeline
from pipelines.spec import parse_spec
from streamforge_core.kafka_probe import ProbeReport, probe


def write_report(out: OutputWrapper, report: ProbeReport) -> None:
    """Print what a connection test found: the connection, the cluster id and broker count, each topic's
    allowed operations, then "ok"; raises CommandError listing the problems (a non-zero exit)."""
    out.write(f"connection: {report.connection}")
    if report.cluster_id:
        out.write(f"cluster {report.cluster_id}: {report.brokers} broker(s)")
    for topic, operations in sorted(report.operations.items()):
        out.write(f"  {topic}: {', '.join(operations) or 'no operations reported'}")
    if report.problems:
        raise CommandError("\n".join(f"{p.kind}: {p.message}" for p in report.problems))
    out.write("ok")


class Command(BaseCommand):
    help = (
        "Connect to the Kafka cluster (KAFKA_* settings), authenticate, and check the principal may read and "
        "write the topics given or those a pipeline names. Exits non-zero naming each problem."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--cluster", default=DEFAULT_CLUSTER_NAME, help="the named cluster (default: the KAFKA_* one)"
        )
        parser.add_argument(
            "--pipeline", help="check the topics of this pipeline's current revision, on its cluster"
        )
        parser.add_argument("--read", nargs="*", default=[], help="topics the principal must read")
        parser.add_argument("--write", nargs="*", default=[], help="topics the principal must write")
        parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster: KafkaCluster | None = None
        if options["cluster"] != DEFAULT_CLUSTER_NAME:
            cluster = KafkaCluster.objects.filter(name=options["cluster"]).first()
            if cluster is None:
                raise CommandError(f"no Kafka cluster named {options['cluster']!r}")
        read, write = list(options["read"]), list(options["write"])
        if options["pipeline"]:
            pipeline = (
                Pipeline.objects.filter(name=options["pipeline"])
                .select_related("current_revision", "cluster")
                .first()
            )
            if pipeline is None or pipeline.current_revision is None:
                raise CommandError(f"no pipeline {options['pipeline']!r} with a revision")
            spec = parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)
            read += spec.source.topics
            write += spec.output_topics()
            cluster = pipeline.cluster
        try:
            conn = connection_for(cluster)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        write_report(self.stdout, probe(conn, read=read, write=write, timeout=options["timeout"]))
