"""``/api/clusters/``: the installation's Kafka clusters (admin only), over ``pipelines.clusters``.

``default`` is the cluster of the ``KAFKA_*`` environment: listed and testable, not editable here. The others
are rows: create, change (PATCH/PUT), delete when unused, and ``POST {name}/test/`` to connect now and check
the principal's access to the topics the cluster's pipelines name. Passwords are references bound to their
cluster (``env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD`` or ``file:<credential dir>/<name>/<file>``); no response
ever carries a password. A new or changed cluster is ``verified: false``, and nothing connects to it, until
an admin's ``test/`` passes.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import is_admin
from pipelines import clusters, registries
from pipelines.api.serializers import ErrorDetailSerializer
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster
from streamforge_core.kafka import SASL_MECHANISMS, SECURITY_PROTOCOLS
from streamforge_core.schema_registry import RegistryError, UnknownSchema
from streamforge_core.wire_format import MAX_SCHEMA_ID


class ClusterSerializer(serializers.Serializer[clusters.ClusterSettings]):
    """A Kafka cluster as shown (``pipelines.clusters.describe``)."""

    name = serializers.CharField()
    description = serializers.CharField()
    from_environment = serializers.BooleanField(help_text="the default cluster: set by KAFKA_* variables")
    bootstrap_servers = serializers.CharField()
    security_protocol = serializers.ChoiceField(SECURITY_PROTOCOLS)
    sasl_mechanism = serializers.CharField(help_text=f"one of {', '.join(SASL_MECHANISMS)}, with SASL")
    sasl_username = serializers.CharField()
    password_ref = serializers.CharField(
        help_text="where the password is: env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD or file:<dir>/<name>/<file>"
    )
    ssl_ca_location = serializers.CharField()
    ssl_certificate_location = serializers.CharField()
    ssl_key_location = serializers.CharField()
    verify_hostname = serializers.BooleanField()
    registry_url = serializers.CharField(
        help_text="the schema registry's Confluent-compatible API (empty: none)"
    )
    registry_username = serializers.CharField(help_text="the registry's basic-auth user")
    registry_password_ref = serializers.CharField(
        help_text="where the registry password is: env:STREAMFORGE_CLUSTER_<NAME>_REGISTRY_PASSWORD or file:<path>"
    )
    registry_ca_location = serializers.CharField()
    registry_certificate_location = serializers.CharField()
    registry_key_location = serializers.CharField()
    pipelines = serializers.IntegerField(help_text="pipelines running on this cluster")
    verified = serializers.BooleanField(
        help_text="an admin's test passed on these settings: the product connects to it only then"
    )
    verified_at = serializers.CharField(help_text="when that test passed (ISO 8601; empty when not verified)")
    verified_by = serializers.CharField(
        help_text="the admin who ran it (empty: not verified, or carried over)"
    )


class ClusterWriteSerializer(serializers.Serializer[dict[str, Any]]):
    """Create (``name`` required) or change a cluster. The rules that span fields (a protocol's needs,
    references, credential directories) are ``pipelines.clusters.validate``'s, answered as field errors."""

    name = serializers.CharField(max_length=63, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    bootstrap_servers = serializers.CharField(max_length=1000, required=False)
    security_protocol = serializers.CharField(max_length=16, required=False)
    sasl_mechanism = serializers.CharField(max_length=16, required=False, allow_blank=True)
    sasl_username = serializers.CharField(max_length=255, required=False, allow_blank=True)
    password_ref = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    ssl_ca_location = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    ssl_certificate_location = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    ssl_key_location = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    verify_hostname = serializers.BooleanField(required=False)
    registry_url = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    registry_username = serializers.CharField(max_length=255, required=False, allow_blank=True)
    registry_password_ref = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    registry_ca_location = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    registry_certificate_location = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    registry_key_location = serializers.CharField(max_length=1000, required=False, allow_blank=True)


class RegistryTrySerializer(serializers.Serializer[Any]):
    """What trying the registry settings found: ``ok``, the ``verdict`` (``Registry reached: N subjects``,
    or not reached / authentication failed / TLS failed / not a Confluent-compatible API), the subject count
    when reached, and the reason (never a secret)."""

    ok = serializers.BooleanField()
    verdict = serializers.CharField()
    subjects = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()


class SubjectSerializer(serializers.Serializer[Any]):
    """A registry subject with its latest version: ``name``, ``version``, ``schema_id`` and ``schema_type``
    (AVRO, PROTOBUF or JSON)."""

    name = serializers.CharField()
    version = serializers.IntegerField()
    schema_id = serializers.IntegerField()
    schema_type = serializers.CharField()


class SchemaReferenceSerializer(serializers.Serializer[Any]):
    """A schema another refers to: the ``name`` it is imported by, where it is registered, its text."""

    name = serializers.CharField()
    subject = serializers.CharField()
    version = serializers.IntegerField()
    schema_str = serializers.CharField()


class RegisteredSchemaSerializer(serializers.Serializer[Any]):
    """One registered schema: ``schema_id``, ``schema_type`` (AVRO, PROTOBUF, JSON), its text, its references
    (transitively, dependencies first), and the ``subject``/``version`` the registry files it under (null
    when it does not say)."""

    schema_id = serializers.IntegerField()
    schema_type = serializers.CharField()
    schema_str = serializers.CharField()
    references = SchemaReferenceSerializer(many=True)
    subject = serializers.CharField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)


class ProblemSerializer(serializers.Serializer[Any]):
    """One problem found: ``kind`` (unreachable, tls, authentication, authorization, missing_topic), the
    ``topic`` it is about (empty: the cluster) and the sentence to show."""

    kind = serializers.CharField()
    topic = serializers.CharField()
    message = serializers.CharField()


class ClusterCheckSerializer(serializers.Serializer[Any]):
    """What ``test/`` found: ``ok``, the cluster id and broker count once it answered, per topic the
    operations the principal may perform, the topics checked, and the problems."""

    cluster = serializers.CharField()
    ok = serializers.BooleanField(source="report.ok")
    connection = serializers.CharField(source="report.connection")
    cluster_id = serializers.CharField(source="report.cluster_id")
    brokers = serializers.IntegerField(source="report.brokers")
    operations = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), source="report.operations"
    )
    read = serializers.ListField(child=serializers.CharField())
    write = serializers.ListField(child=serializers.CharField())
    problems = ProblemSerializer(many=True, source="report.problems")
    verified = serializers.BooleanField(
        help_text="the test reached the cluster and authenticated: these settings are now approved"
    )


class ClusterTrySerializer(serializers.Serializer[Any]):
    """What ``try/`` found with settings not saved: ``ok`` (reached and authenticated), the ``verdict`` in a
    line (``Reached: 1 broker, authentication ok``, ``Authentication failed``, ``TLS failed``, ``Not
    reached``), the cluster id and broker count once it answered, and the problems."""

    ok = serializers.BooleanField()
    verdict = serializers.CharField()
    connection = serializers.CharField()
    cluster_id = serializers.CharField()
    brokers = serializers.IntegerField()
    problems = ProblemSerializer(many=True)
    registry = RegistryTrySerializer(
        allow_null=True, help_text="the registry's try; null: no registry URL given"
    )


def _field_errors(exc: clusters.ClusterError) -> Response:
    return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)


class ClusterViewSet(viewsets.ViewSet):
    """``/api/clusters/``: Kafka clusters, by name. Every action needs the admin role, except reading the
    registry's subjects and schemas (``may_see_subjects``); changes are audited (``kafka_cluster.*``)."""

    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9-]{0,62}"

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # subjects/ and schemas/{id}/ are for whoever may browse the cluster's topics; they check that
        if self.action not in ("subjects", "registered_schema") and not is_admin(request.user):
            raise PermissionDenied("Kafka clusters are managed by admins")

    def _row(self, name: str) -> KafkaCluster | None:
        """The named row; None for ``default``. Raises NotFound."""
        if name == DEFAULT_CLUSTER_NAME:
            return None
        row = KafkaCluster.objects.filter(name=name).first()
        if row is None:
            raise NotFound(f"no Kafka cluster named {name!r}")
        return row

    @extend_schema(responses={200: ClusterSerializer(many=True)})
    def list(self, request: Request) -> Response:
        """Every cluster: ``default`` first, then by name (an installation has a handful: not paginated)."""
        shown = [clusters.describe(c) for c in clusters.clusters()]
        return Response(ClusterSerializer(shown, many=True).data)  # type: ignore[arg-type]  # many=True

    @extend_schema(responses={200: ClusterSerializer})
    def retrieve(self, request: Request, name: str) -> Response:
        """One cluster's settings."""
        return Response(ClusterSerializer(clusters.describe(self._row(name))).data)

    @extend_schema(request=ClusterWriteSerializer, responses={201: ClusterSerializer})
    def create(self, request: Request) -> Response:
        """Add a cluster. 400 names each field that is wrong (a password instead of a reference among them)."""
        serializer = ClusterWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        if "name" not in serializer.validated_data:
            return Response({"name": ["This field is required."]}, status=status.HTTP_400_BAD_REQUEST)
        try:
            row = clusters.save_cluster(actor=request.user, values=serializer.validated_data)
        except clusters.ClusterError as exc:
            return _field_errors(exc)
        return Response(ClusterSerializer(clusters.describe(row)).data, status=status.HTTP_201_CREATED)

    def _change(self, request: Request, name: str) -> Response:
        row = self._row(name)
        if row is None:
            return Response(
                {"name": ["the default cluster is set by the KAFKA_* environment, not here"]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        serializer = ClusterWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        if values.pop("name", name) != name:
            return Response({"name": ["a cluster's name cannot change"]}, status=status.HTTP_400_BAD_REQUEST)
        try:
            row = clusters.save_cluster(actor=request.user, values=values, cluster=row)
        except clusters.ClusterError as exc:
            return _field_errors(exc)
        return Response(ClusterSerializer(clusters.describe(row)).data)

    @extend_schema(request=ClusterWriteSerializer, responses={200: ClusterSerializer})
    def update(self, request: Request, name: str) -> Response:
        """Change a cluster's settings (fields not given keep their value; running pipelines pick the change
        up at their next start)."""
        return self._change(request, name)

    @extend_schema(request=ClusterWriteSerializer, responses={200: ClusterSerializer})
    def partial_update(self, request: Request, name: str) -> Response:
        """Change some of a cluster's settings."""
        return self._change(request, name)

    @extend_schema(
        responses={
            204: None,
            400: inline_serializer(
                "DefaultClusterRefused", {"name": serializers.ListField(child=serializers.CharField())}
            ),
            409: ErrorDetailSerializer,
        }
    )
    def destroy(self, request: Request, name: str) -> Response:
        """Delete a cluster nothing uses (409 naming what still does)."""
        row = self._row(name)
        if row is None:
            return Response(
                {"name": ["the default cluster is set by the KAFKA_* environment, not here"]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        try:
            clusters.delete_cluster(actor=request.user, cluster=row)
        except clusters.ClusterInUse as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=ClusterWriteSerializer, responses={200: ClusterTrySerializer})
    @action(detail=False, methods=["post"], url_path="try")
    def try_settings(self, request: Request) -> Response:
        """Try settings before saving them (the body of a create; ``name`` required): connect once, bounded
        to a few seconds, and say whether the brokers were reached, how many, and whether authentication
        passed, or why not. Saves and approves nothing; 200 whatever it finds (``ok`` says), 400 naming each
        field that does not validate. Audited (``kafka_cluster.try``)."""
        serializer = ClusterWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        if "name" not in serializer.validated_data:
            return Response({"name": ["This field is required."]}, status=status.HTTP_400_BAD_REQUEST)
        try:
            report = clusters.try_settings(actor=request.user, values=serializer.validated_data)
        except clusters.ClusterError as exc:
            return _field_errors(exc)
        registry = registries.try_registry(
            actor=request.user, values=serializer.validated_data, cluster=serializer.validated_data["name"]
        )
        shown = {
            "ok": clusters.connected(report) and (registry is None or registry.ok),
            "verdict": clusters.try_verdict(report),
            "connection": report.connection,
            "cluster_id": report.cluster_id,
            "brokers": report.brokers,
            "problems": report.problems,
            "registry": registry,
        }
        return Response(ClusterTrySerializer(shown).data)

    @extend_schema(request=None, responses={200: SubjectSerializer(many=True), 503: ErrorDetailSerializer})
    @action(detail=True, methods=["get"])
    def subjects(self, request: Request, name: str) -> Response:
        """The cluster's schema registry subjects, each with its latest version, schema id and type, by name
        (``default``: the ``SCHEMA_REGISTRY_URL`` registry). For admins and the members of a team with a
        pipeline on the cluster (404 for others, as for a cluster they cannot see). 404 when the cluster has
        no registry, 503 naming why the registry cannot answer."""
        row = self._row(name)
        if not registries.may_see_subjects(request.user, row):
            raise NotFound(f"no Kafka cluster named {name!r}")
        try:
            found = registries.subjects(row)
        except registries.RegistryNotConfigured as exc:
            raise NotFound(str(exc)) from None
        except (
            ValueError,
            RegistryError,
        ) as exc:  # not approved, a password that cannot be read, unreachable
            return Response({"detail": f"the schema registry cannot answer: {exc}"}, status=503)
        return Response(SubjectSerializer(found, many=True).data)

    @extend_schema(request=None, responses={200: RegisteredSchemaSerializer, 503: ErrorDetailSerializer})
    @action(detail=True, methods=["get"], url_path=r"schemas/(?P<schema_id>[0-9]{1,10})", url_name="schema")
    def registered_schema(self, request: Request, name: str, schema_id: str) -> Response:
        """Schema ``schema_id`` of the cluster's registry: its text, type, references and where it is filed
        (what the DLQ console links a decoded payload to). Who may see it and the 404/503 answers are as for
        ``subjects``; 404 also for an id the registry does not have."""
        row = self._row(name)
        if not registries.may_see_subjects(request.user, row):
            raise NotFound(f"no Kafka cluster named {name!r}")
        if int(schema_id) > MAX_SCHEMA_ID:  # beyond the ids a registry assigns: none is asked
            raise NotFound(f"no schema {schema_id}: registry ids are at most {MAX_SCHEMA_ID}")
        try:
            found = registries.schema(row, int(schema_id))
        except registries.RegistryNotConfigured as exc:
            raise NotFound(str(exc)) from None
        except UnknownSchema as exc:
            raise NotFound(str(exc)) from None
        except (ValueError, RegistryError) as exc:
            return Response({"detail": f"the schema registry cannot answer: {exc}"}, status=503)
        return Response(RegisteredSchemaSerializer(found).data)

    @extend_schema(request=None, responses={200: ClusterCheckSerializer})
    @action(detail=True, methods=["post"])
    def test(self, request: Request, name: str) -> Response:
        """Connect now: cluster id, broker count, and whether the principal may read and write the topics
        the cluster's pipelines name; each failure named (unreachable, TLS and why, authentication, not
        authorized to X on topic Y). 200 whatever it finds: ``ok`` says. When it reached the cluster and
        authenticated, its current settings are approved (``verified``) and the product's own clients may
        connect to it. Audited (``kafka_cluster.test``)."""
        checked = clusters.check_cluster(actor=request.user, cluster=self._row(name))
        return Response(ClusterCheckSerializer(checked).data)
