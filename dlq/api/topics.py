"""REST endpoints of the topic browser and test messages (mounted under /api/pipelines/<name>/):

- ``GET topics/``: the topics the pipeline owns, with their roles;
- ``GET topics/<topic>/``: partitions and watermarks, configs, the pipeline's consumer group lag;
- ``GET topics/<topic>/messages/``: a page of records, masked for viewers as the DLQ console masks;
- ``GET topics/<topic>/records/<partition>/<offset>/outcomes/``: what became of a source record at each
  destination;
- ``GET topics/<topic>/search/``: one bounded step of a server-side search (substring or DSL filter);
- ``GET topics/<topic>/tail/``: the records written since a position (a live tail polls it);
- ``GET topics/<topic>/groups/``: the consumer groups reading the topic, with per-partition lag;
- ``POST test-messages/``: produce a test message to a source topic (operators; reason required; audited).

Another team's pipeline, and a topic the pipeline does not own, are 404. Bad input is 400 naming the field.
Views validate the request and call ``dlq.topic_browser`` / ``dlq.test_messages``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaException
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dlq import consumer_groups, test_messages, topic_browser
from dlq.api.views import ServiceErrorsMixin
from dlq.topic_browser import BadPosition, TopicNotFound
from pipelines.clusters import ClusterNotVerified, CredentialUnavailable

# ------------------------------------------------------------------------------------------ serializers


class OwnedTopicSerializer(serializers.Serializer[Any]):
    """A topic of the pipeline and its role (``source``, ``destination <name>`` or ``dlq``)."""

    topic = serializers.CharField()
    role = serializers.CharField()


class PartitionSerializer(serializers.Serializer[Any]):
    """A partition's low and high watermarks."""

    partition = serializers.IntegerField()
    low = serializers.IntegerField()
    high = serializers.IntegerField()


class GroupLagSerializer(serializers.Serializer[Any]):
    """A consumer group's committed offset (null: none) and lag on one partition."""

    group = serializers.CharField()
    partition = serializers.IntegerField()
    committed = serializers.IntegerField(allow_null=True)
    lag = serializers.IntegerField()


class TopicOverviewSerializer(serializers.Serializer[Any]):
    """A topic's partitions, configs (name -> value) and the pipeline's group lag; ``error`` when the
    cluster did not answer."""

    topic = serializers.CharField()
    role = serializers.CharField()
    cluster = serializers.CharField()
    partitions = PartitionSerializer(many=True)
    configs = serializers.DictField(child=serializers.CharField())
    groups = GroupLagSerializer(many=True)
    error = serializers.CharField()


class PayloadViewSerializer(serializers.Serializer[Any]):
    """A key or value as the DLQ message page shows it (``dlq.presenters.PayloadView``)."""

    encoding = serializers.CharField()
    size = serializers.IntegerField()
    pretty = serializers.CharField()
    raw = serializers.CharField()
    hex = serializers.CharField()
    masked = serializers.BooleanField()
    withheld = serializers.BooleanField()


class HeaderSerializer(serializers.Serializer[Any]):
    """A header: ``value`` as text, hex digits, ``•••`` when masked, or null (``encoding`` says which)."""

    name = serializers.CharField()
    encoding = serializers.CharField()
    value = serializers.CharField(allow_null=True)


class LineageSerializer(serializers.Serializer[Any]):
    """The source record of a produced record; ``owned`` when its topic is the pipeline's."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    owned = serializers.BooleanField()


class BrowsedRecordSerializer(serializers.Serializer[Any]):
    """One record (timestamp in epoch ms, null when unknown); ``test_by`` names who produced it as a test
    message through the console (its own record, not a header); ``erased`` when an approved delete erased
    its content (key and value then say so, headers are empty)."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    timestamp_ms = serializers.IntegerField(allow_null=True)
    key = PayloadViewSerializer()
    value = PayloadViewSerializer()
    headers = HeaderSerializer(many=True)
    lineage = LineageSerializer(allow_null=True)
    test_by = serializers.CharField()
    erased = serializers.BooleanField()
    value_schema = serializers.CharField(
        help_text="a registry-format topic: the schema the value was decoded with ('avro, schema 12, subject "
        "s version 2'), or why it is shown as bytes ('not decoded: ...'); empty for JSON topics"
    )


class RecordPageSerializer(serializers.Serializer[Any]):
    """A page of records; pass ``next_cursor`` as ``cursor`` for the next one (empty: none)."""

    records = BrowsedRecordSerializer(many=True)
    next_cursor = serializers.CharField()
    truncated = serializers.BooleanField()


class BrowseQuerySerializer(serializers.Serializer[Any]):
    """Query of ``messages/``: ``from_offset`` or ``from_time`` (ISO-8601), not both."""

    partition = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)
    from_offset = serializers.IntegerField(required=False, min_value=0, max_value=2**62)
    from_time = serializers.DateTimeField(required=False)
    order = serializers.ChoiceField(choices=["newest", "oldest"], default="newest")
    cursor = serializers.CharField(required=False, default="", allow_blank=True, max_length=20_000)
    limit = serializers.IntegerField(
        required=False, default=topic_browser.PAGE_SIZE, min_value=1, max_value=topic_browser.MAX_PAGE_SIZE
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Refuses ``from_offset`` together with ``from_time``."""
        if "from_offset" in attrs and "from_time" in attrs:
            raise serializers.ValidationError({"from_time": ["give from_offset or from_time, not both"]})
        return attrs


class SearchQuerySerializer(serializers.Serializer[Any]):
    """Query of ``search/``: ``q`` (a substring, or with ``mode=dsl`` a DSL filter expression), the range
    (``partition``, ``from_offset`` or ``from_time`` (not both), ``max_scan`` records per partition) or a
    previous step's ``cursor``."""

    partition = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)
    from_offset = serializers.IntegerField(required=False, min_value=0, max_value=2**62)
    from_time = serializers.DateTimeField(required=False)
    cursor = serializers.CharField(required=False, default="", allow_blank=True, max_length=20_000)
    q = serializers.CharField(max_length=10_000, trim_whitespace=False)
    mode = serializers.ChoiceField(choices=["text", "dsl"], default="text")
    max_scan = serializers.IntegerField(
        required=False,
        default=topic_browser.SCAN_PER_PARTITION,
        min_value=1,
        max_value=topic_browser.MAX_SCAN_PER_PARTITION,
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Refuses ``from_offset`` together with ``from_time``."""
        if "from_offset" in attrs and "from_time" in attrs:
            raise serializers.ValidationError({"from_time": ["give from_offset or from_time, not both"]})
        return attrs


class ScanRangeSerializer(serializers.Serializer[Any]):
    """A partition's search range: offsets ``first`` to ``end`` (exclusive), read up to ``next``."""

    partition = serializers.IntegerField()
    first = serializers.IntegerField()
    next = serializers.IntegerField()
    end = serializers.IntegerField()


class SearchStepSerializer(serializers.Serializer[Any]):
    """One search step: its matches, how many records it scanned and matched, the ranges with progress,
    ``next_cursor`` to continue (empty: done) and ``stopped`` (``time``, ``bytes``, ``matches`` or empty)."""

    records = BrowsedRecordSerializer(many=True)
    scanned = serializers.IntegerField()
    matched = serializers.IntegerField()
    ranges = ScanRangeSerializer(many=True)
    next_cursor = serializers.CharField()
    stopped = serializers.CharField()
    done = serializers.BooleanField()


class TailQuerySerializer(serializers.Serializer[Any]):
    """Query of ``tail/``: ``after`` (the previous step's ``position``; empty: start from now)."""

    after = serializers.CharField(required=False, default="", allow_blank=True, max_length=20_000)
    partition = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)


class TailStepSerializer(serializers.Serializer[Any]):
    """New records since ``after``, oldest first, and the ``position`` to ask from next."""

    records = BrowsedRecordSerializer(many=True)
    position = serializers.CharField()


class GroupOffsetsSerializer(serializers.Serializer[Any]):
    """A group on one partition: committed offset (null: none), end offset (high watermark), lag."""

    partition = serializers.IntegerField()
    committed = serializers.IntegerField(allow_null=True)
    end = serializers.IntegerField()
    lag = serializers.IntegerField()


class TopicGroupSerializer(serializers.Serializer[Any]):
    """A consumer group reading the topic: its state, per-partition offsets and total lag;
    ``pipeline_group`` for the pipeline's own group."""

    group = serializers.CharField()
    state = serializers.CharField()
    partitions = GroupOffsetsSerializer(many=True)
    lag = serializers.IntegerField()
    pipeline_group = serializers.BooleanField()


class TestMessageSerializer(serializers.Serializer[Any]):
    """A test message: ``topic`` (default: the first source topic), ``value`` and optional ``key`` as text
    or, with ``encoding=base64``, base64; ``headers`` name -> text value; a required ``reason``; for a
    registry-format source, optionally the ``subject`` and ``schema_version`` that encode the JSON value."""

    topic = serializers.CharField(required=False, default="", allow_blank=True, max_length=249)
    value = serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=1_000_000)
    key = serializers.CharField(
        required=False, allow_null=True, default=None, trim_whitespace=False, max_length=10_000
    )
    encoding = serializers.ChoiceField(choices=["text", "base64"], default="text")
    headers = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=10_000), required=False, default=dict
    )
    reason = serializers.CharField(max_length=2000)
    subject = serializers.CharField(
        required=False, default="", allow_blank=True, max_length=255,
        help_text="a registry-format source: the subject whose schema encodes the JSON value (default "
        "<topic>-value)",
    )  # fmt: skip
    schema_version = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=2**31 - 1,
        help_text="a registry-format source: that version of the subject (default: its latest)",
    )  # fmt: skip

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Decodes ``value`` and ``key`` to bytes (base64 errors name the field)."""
        for name in ("value", "key"):
            text = attrs.get(name)
            if text is None:
                continue
            if attrs["encoding"] == "base64":
                try:
                    attrs[name] = base64.b64decode(text, validate=True)
                except (binascii.Error, ValueError):
                    raise serializers.ValidationError({name: ["not valid base64"]}) from None
            else:
                attrs[name] = text.encode()
        return attrs


class ProducedTestSerializer(serializers.Serializer[Any]):
    """Where the test message landed on its source topic."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()


class RecordDestinationOutcomeSerializer(serializers.Serializer[Any]):
    """One destination's outcome (``produced``, ``dead_lettered``, ``filtered``, ``not_in_replay``: a
    console replay for other destinations only, ``pending``) and what the dry run expected."""

    destination = serializers.CharField()
    topic = serializers.CharField()
    outcome = serializers.CharField()
    expected = serializers.CharField()
    expected_error = serializers.CharField()
    partition = serializers.IntegerField(allow_null=True)
    offset = serializers.IntegerField(allow_null=True)
    dead_letter_id = serializers.IntegerField(allow_null=True)
    error_type = serializers.CharField()
    error_message = serializers.CharField()


class RecordOutcomesSerializer(serializers.Serializer[Any]):
    """A source record's outcomes per destination; ``done`` once none is pending; ``erased`` when an approved
    delete erased the record's content (then it is not read or evaluated)."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    found = serializers.BooleanField()
    committed = serializers.BooleanField()
    done = serializers.BooleanField()
    test_by = serializers.CharField()
    destinations = RecordDestinationOutcomeSerializer(many=True)
    error = serializers.CharField()
    erased = serializers.BooleanField()
    # A console replay's destinations (empty: every destination); the others are ``not_in_replay``.
    replay_for = serializers.ListField(child=serializers.CharField())


# ------------------------------------------------------------------------------------------ views


class TopicErrorsMixin(ServiceErrorsMixin):
    """As ``ServiceErrorsMixin``, plus: TopicNotFound -> 404, BadPosition -> 400 naming the field, a
    cluster that does not answer, or may not be connected to (not approved by an admin's test, a password
    that cannot be read) -> 503 with the reason."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, TopicNotFound):
            return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
        if isinstance(exc, BadPosition):
            return Response({exc.field: [exc.message]}, status=status.HTTP_400_BAD_REQUEST)
        if isinstance(exc, KafkaException):
            return Response(
                {"detail": f"the cluster did not answer: {exc}"}, status=status.HTTP_503_SERVICE_UNAVAILABLE
            )
        if isinstance(exc, ClusterNotVerified | CredentialUnavailable):
            return Response(
                {"detail": f"the Kafka cluster cannot be used: {exc}"},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return super().handle_exception(exc)


class OwnedTopicsView(TopicErrorsMixin, APIView):
    """``GET /api/pipelines/{name}/topics/``: the topics the pipeline's current spec names."""

    @extend_schema(responses={200: OwnedTopicSerializer(many=True)})
    def get(self, request: Request, name: str) -> Response:
        pipeline = topic_browser.pipeline_for(request.user, name)
        roles = topic_browser.owned_topics(topic_browser.spec_of(pipeline))
        return Response([{"topic": topic, "role": role} for topic, role in roles.items()])


class TopicView(TopicErrorsMixin, APIView):
    """``GET /api/pipelines/{name}/topics/{topic}/``: partitions, configs and group lag of an owned topic."""

    @extend_schema(responses={200: TopicOverviewSerializer})
    def get(self, request: Request, name: str, topic: str) -> Response:
        pipeline = topic_browser.pipeline_for(request.user, name)
        return Response(TopicOverviewSerializer(topic_browser.topic_overview(pipeline, topic)).data)


class TopicMessagesView(TopicErrorsMixin, APIView):
    """``GET /api/pipelines/{name}/topics/{topic}/messages/``: a page of records (see
    ``dlq.topic_browser.browse``), newest first unless ``order=oldest``. Reads without a consumer group."""

    @extend_schema(parameters=[BrowseQuerySerializer], responses={200: RecordPageSerializer})
    def get(self, request: Request, name: str, topic: str) -> Response:
        query = BrowseQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        pipeline = topic_browser.pipeline_for(request.user, name)
        from_time: datetime | None = q.get("from_time")
        page = topic_browser.browse(
            pipeline,
            topic,
            user=request.user,
            partition=q.get("partition"),
            from_offset=q.get("from_offset"),
            from_time_ms=int(from_time.timestamp() * 1000) if from_time is not None else None,
            order=q["order"],
            cursor=q["cursor"],
            limit=q["limit"],
        )
        return Response(RecordPageSerializer(_plain(page)).data)


class RecordOutcomesView(TopicErrorsMixin, APIView):
    """``GET /api/pipelines/{name}/topics/{topic}/records/{partition}/{offset}/outcomes/``: what became of a
    source record at each destination (see ``dlq.test_messages.record_outcomes``)."""

    @extend_schema(responses={200: RecordOutcomesSerializer})
    def get(self, request: Request, name: str, topic: str, partition: int, offset: int) -> Response:
        pipeline = topic_browser.pipeline_for(request.user, name)
        result = test_messages.record_outcomes(pipeline, topic=topic, partition=partition, offset=offset)
        return Response(RecordOutcomesSerializer(_plain(result)).data)


class TestMessagesView(TopicErrorsMixin, APIView):
    """``POST /api/pipelines/{name}/test-messages/``: produce a test message to a source topic (operator
    role; ``reason`` required; one audit event with topic, partition and offset). 201 with where it
    landed; follow it with ``.../records/{partition}/{offset}/outcomes/``."""

    @extend_schema(request=TestMessageSerializer, responses={201: ProducedTestSerializer})
    def post(self, request: Request, name: str) -> Response:
        pipeline = topic_browser.pipeline_for(request.user, name)
        body = TestMessageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        spec = topic_browser.spec_of(pipeline)
        produced = test_messages.produce_test_message(
            actor=request.user,  # type: ignore[arg-type]
            pipeline=pipeline,
            topic=data["topic"] or spec.source.topics[0],
            value=data["value"],
            key=data["key"],
            headers=[(header, value.encode()) for header, value in data["headers"].items()],
            reason=data["reason"],
            subject=data["subject"],
            schema_version=data["schema_version"],
        )
        return Response(ProducedTestSerializer(produced).data, status=status.HTTP_201_CREATED)


def _time_ms(moment: datetime | None) -> int | None:
    return int(moment.timestamp() * 1000) if moment is not None else None


class TopicSearchView(TopicErrorsMixin, APIView):
    """``GET /api/pipelines/{name}/topics/{topic}/search/``: one step of a server-side search of keys and
    values (see ``dlq.topic_browser.search``); follow ``next_cursor`` until ``done``. A DSL expression that
    does not parse is 400 on ``q`` with its position."""

    @extend_schema(parameters=[SearchQuerySerializer], responses={200: SearchStepSerializer})
    def get(self, request: Request, name: str, topic: str) -> Response:
        query = SearchQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        pipeline = topic_browser.pipeline_for(request.user, name)
        step = topic_browser.search(
            pipeline,
            topic,
            user=request.user,
            query=q["q"],
            mode=q["mode"],
            partition=q.get("partition"),
            from_offset=q.get("from_offset"),
            from_time_ms=_time_ms(q.get("from_time")),
            max_scan=q["max_scan"],
            cursor=q["cursor"],
        )
        return Response(SearchStepSerializer({**_plain(step), "done": step.done}).data)


class TopicTailView(TopicErrorsMixin, APIView):
    """``GET /api/pipelines/{name}/topics/{topic}/tail/``: the records written since ``after`` (see
    ``dlq.topic_browser.tail``); poll with the returned ``position``."""

    @extend_schema(parameters=[TailQuerySerializer], responses={200: TailStepSerializer})
    def get(self, request: Request, name: str, topic: str) -> Response:
        query = TailQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        pipeline = topic_browser.pipeline_for(request.user, name)
        step = topic_browser.tail(
            pipeline,
            topic,
            user=request.user,
            after=query.validated_data["after"],
            partition=query.validated_data.get("partition"),
        )
        return Response(TailStepSerializer(_plain(step)).data)


class TopicGroupsView(TopicErrorsMixin, APIView):
    """``GET /api/pipelines/{name}/topics/{topic}/groups/``: the consumer groups reading an owned topic, with
    committed offset, end offset and lag per partition (see ``dlq.topic_browser.topic_groups``)."""

    @extend_schema(responses={200: TopicGroupSerializer(many=True)})
    def get(self, request: Request, name: str, topic: str) -> Response:
        pipeline = topic_browser.pipeline_for(request.user, name)
        groups = topic_browser.topic_groups(pipeline, topic)
        return Response(TopicGroupSerializer([{**_plain(g), "lag": g.lag} for g in groups], many=True).data)


def _plain(result: Any) -> dict[str, Any]:
    return dataclasses.asdict(result)


class TeamGroupPartitionSerializer(serializers.Serializer[Any]):
    """A group on one partition of one topic: committed offset (null: none), end offset, lag."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    committed = serializers.IntegerField(allow_null=True)
    end = serializers.IntegerField()
    lag = serializers.IntegerField()


class TeamGroupSerializer(serializers.Serializer[Any]):
    """A consumer group with commits on the user's pipelines' topics: cluster, state, members (null: not
    known), the topics, total lag and per-partition offsets."""

    cluster = serializers.CharField()
    group = serializers.CharField()
    state = serializers.CharField()
    members = serializers.IntegerField(allow_null=True)
    topics = serializers.ListField(child=serializers.CharField())
    lag = serializers.IntegerField()
    partitions = TeamGroupPartitionSerializer(many=True)


class ClusterProblemSerializer(serializers.Serializer[Any]):
    """A cluster whose groups could not be read, and why."""

    cluster = serializers.CharField()
    error = serializers.CharField()


class ConsumerGroupsPageSerializer(serializers.Serializer[Any]):
    """One page of consumer groups (``page`` of ``pages``, ``count`` in all) and the clusters not read
    (``cluster_errors``)."""

    groups = TeamGroupSerializer(many=True)
    cluster_errors = ClusterProblemSerializer(many=True, source="errors")
    count = serializers.IntegerField()
    page = serializers.IntegerField()
    pages = serializers.IntegerField()


class ConsumerGroupsQuerySerializer(serializers.Serializer[Any]):
    """``page``: from 1 (past the last: the last)."""

    page = serializers.IntegerField(required=False, default=1, min_value=1, max_value=1_000_000)


class ConsumerGroupsView(APIView):
    """``GET /api/consumer-groups/``: every consumer group with committed offsets on a source, destination or
    DLQ topic of the pipelines the user may see, by cluster and name, ``consumer_groups.PAGE_SIZE`` per page;
    a cluster that does not answer is listed in ``cluster_errors`` (see ``dlq.consumer_groups``)."""

    @extend_schema(parameters=[ConsumerGroupsQuerySerializer], responses={200: ConsumerGroupsPageSerializer})
    def get(self, request: Request) -> Response:
        query = ConsumerGroupsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        result = consumer_groups.team_consumer_groups(request.user, page=query.validated_data["page"])
        return Response(ConsumerGroupsPageSerializer(_plain(result)).data)
