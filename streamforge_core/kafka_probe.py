"""Test a Kafka connection before trusting it: reach the cluster, authenticate, and check that the principal
may read and write the topics a pipeline names. One answer per problem, each saying what failed and why, in
the words an operator acts on: unreachable, the TLS handshake and its reason, authentication and the broker's
reason, or "not authorized to WRITE topic X".

Used by the driver before it starts its query (credential and ACL faults halt the pipeline with reason Config
instead of crash-looping), by ``manage.py kafka_check`` and by the readiness probe. The topic checks use the
operations the broker says the principal may perform (``include_authorized_operations``, KIP-430); a broker
without an authorizer answers every operation. Plain Python on confluent-kafka, like ``kafka``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient

from streamforge_core.kafka import KafkaConnection, admin_config

ProblemKind = Literal["unreachable", "tls", "authentication", "authorization", "missing_topic"]

#: The problems a restart cannot fix: a pipeline that meets one halts (reason Config) instead of retrying.
CONFIG_KINDS: frozenset[ProblemKind] = frozenset({"tls", "authentication", "authorization"})


@dataclass(frozen=True)
class Problem:
    """One thing wrong: its kind, the topic it is about (empty for the cluster) and the sentence to show."""

    kind: ProblemKind
    message: str
    topic: str = ""


@dataclass
class ProbeReport:
    """What ``probe`` found. ``ok`` when there is no problem; ``cluster_id`` and ``brokers`` (a count) are
    known once the cluster answered; ``operations`` maps each checked topic to the operations the principal
    may perform on it (names such as ``READ``, ``WRITE``)."""

    connection: str
    cluster_id: str = ""
    brokers: int = 0
    operations: dict[str, list[str]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def config_problems(self) -> list[Problem]:
        """The problems that make restarting pointless (``CONFIG_KINDS``)."""
        return [p for p in self.problems if p.kind in CONFIG_KINDS]


_SSL_REASON = re.compile(
    r"SSL handshake failed: (?:error:[0-9A-F]+:SSL routines::)?(?P<reason>.+?)(?: \(after \d|$)"
)
_TLS_ALERT = re.compile(r"ssl/tls alert (?P<alert>[a-z ]+)")
_SASL_REASON = re.compile(r"SASL authentication error: (?P<reason>.+?)(?: \(after|$)")


def _cluster_problem(conn: KafkaConnection, errors: list[str], exc: BaseException) -> Problem:
    """Name why the cluster did not answer, from what the client reported on the way (its error callback)."""
    seen = " | ".join(errors)
    sasl = _SASL_REASON.search(seen)
    if sasl or "Authentication failed" in seen:
        reason = sasl.group("reason").strip() if sasl else seen
        return Problem(
            "authentication", f"authentication as {conn.sasl_username or 'this client'} failed: {reason}"
        )
    ssl = _SSL_REASON.search(seen)
    if ssl:
        reason = ssl.group("reason").strip()
        if (
            "certificate verify failed" in reason
            and conn.verify_hostname
            and _answers_without_host_check(conn)
        ):
            reason = f"the broker's certificate does not name the host in {conn.bootstrap_servers} (hostname verification)"
        return Problem("tls", f"the TLS handshake with {conn.bootstrap_servers} failed: {reason}")
    alert = _TLS_ALERT.search(seen)
    if alert:
        what = alert.group("alert").strip()
        hint = " (the broker wants a client certificate it trusts)" if "certificate" in what else ""
        return Problem("tls", f"the broker ended the TLS handshake with the alert {what!r}{hint}")
    detail = next((e for e in errors if "brokers are down" not in e), "") or str(
        exc.args[0] if exc.args else exc
    )
    return Problem("unreachable", f"{conn.bootstrap_servers} did not answer: {detail}")


def _answers_without_host_check(conn: KafkaConnection) -> bool:
    """Whether the cluster answers when the host name is not checked: then the certificate is trusted and only
    its names are wrong, which deserves its own message."""
    loose = dataclasses.replace(conn, verify_hostname=False)
    admin = AdminClient(admin_config(loose, extra={"socket.timeout.ms": 3000, "log_level": 0}))
    try:
        admin.describe_cluster(request_timeout=3).result(timeout=5)
    except KafkaException:
        return False
    return True


def _remember(errors: list[str], error: KafkaError) -> None:
    """Keep each distinct error text once (a client retries and reports the same failure many times)."""
    text = error.str()
    if text not in errors and len(errors) < 10:
        errors.append(text)


def probe(
    conn: KafkaConnection,
    *,
    read: Sequence[str] = (),
    write: Sequence[str] = (),
    timeout: float = 10.0,
) -> ProbeReport:
    """Connect to ``conn``'s cluster (within ``timeout`` seconds) and check that the principal may READ the
    topics in ``read`` and WRITE those in ``write``. Never raises for what it finds: each finding is a
    ``Problem`` in the report. Blocks up to about twice ``timeout``."""
    report = ProbeReport(connection=conn.describe())
    errors: list[str] = []
    admin = AdminClient(
        admin_config(
            conn,
            extra={
                "error_cb": lambda error: _remember(errors, error),
                "socket.timeout.ms": int(timeout * 1000),
                "log_level": 0,  # the error callback gets what matters; not a line per retry on stderr
            },
        )
    )
    try:
        cluster = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 5)
    except KafkaException as exc:
        for _ in range(8):  # the error callback is served by poll; give it what the client saw
            admin.poll(0.25)
        report.problems.append(_cluster_problem(conn, errors, exc))
        return report
    report.cluster_id, report.brokers = str(cluster.cluster_id or ""), len(cluster.nodes)
    needed: dict[str, set[str]] = {}
    for topic in read:
        needed.setdefault(topic, set()).update({"READ", "DESCRIBE"})
    for topic in write:
        needed.setdefault(topic, set()).update({"WRITE", "DESCRIBE"})
    if not needed:
        return report
    futures = admin.describe_topics(
        TopicCollection(sorted(needed)), include_authorized_operations=True, request_timeout=timeout
    )
    for topic, future in sorted(futures.items()):
        try:
            description = future.result(timeout=timeout + 5)
        except KafkaException as exc:
            error = exc.args[0]
            code = error.code() if isinstance(error, KafkaError) else None
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                report.problems.append(
                    Problem("authorization", f"not authorized to DESCRIBE topic {topic}", topic)
                )
            elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                report.problems.append(Problem("missing_topic", f"topic {topic} does not exist", topic))
            else:
                report.problems.append(
                    Problem("unreachable", f"topic {topic} could not be described: {error}", topic)
                )
            continue
        allowed = {op.name for op in (description.authorized_operations or [])}
        if AclOperation.ALL.name in allowed:
            allowed |= {"READ", "WRITE", "DESCRIBE"}
        report.operations[topic] = sorted(allowed)
        if not allowed:
            continue  # the broker did not say (an old broker): nothing to judge by
        for operation in sorted(needed[topic] - allowed):
            report.problems.append(
                Problem("authorization", f"not authorized to {operation} topic {topic}", topic)
            )
    return report
