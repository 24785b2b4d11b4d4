"""``POST /api/dlq/import/``: a JSON Lines export of dead letters imported as parked dead letters of one
pipeline (``dlq.services.imports``), or with ``dry_run`` checked and counted.

Multipart: ``file`` (the ``.jsonl`` export), ``pipeline`` (the pipeline's id), ``dry_run`` (true or false,
default false). The pipeline must be one of the caller's teams' (another team's, or none, is a 400 on
``pipeline``, as if it did not exist); importing needs the operator role there (403). A file that is too
large is refused from its announced length before it is read; one that is not ours or does not fit the
pipeline is a 400 on ``file`` naming each bad line.
"""

from __future__ import annotations

from typing import Any

from django.core.files.uploadedfile import UploadedFile
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.permissions import visible_teams
from dlq.api.views import ServiceErrorsMixin
from dlq.services import imports
from pipelines.models import Pipeline

#: Room for the multipart envelope and the other fields around the file in the announced request length.
_ENVELOPE_BYTES = 64 * 1024


class ImportRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dlq/import/`` (multipart): the export file, the pipeline's id, and whether only to check."""

    file = serializers.FileField(allow_empty_file=False)
    pipeline = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    dry_run = serializers.BooleanField(default=False)


class ImportResultSerializer(serializers.Serializer[imports.ImportResult]):
    """What an import did (``created``) or, with ``dry_run``, would do: rows in the file, how many are already
    in the pipeline from an earlier import, how many came masked, and the rows per destination and error
    type; ``ids`` of the dead letters created."""

    import_id = serializers.CharField()
    pipeline = serializers.CharField()
    team = serializers.CharField()
    dry_run = serializers.BooleanField()
    rows = serializers.IntegerField()
    created = serializers.IntegerField()
    already_imported = serializers.IntegerField()
    masked = serializers.IntegerField()
    destinations = serializers.DictField(child=serializers.IntegerField())
    error_types = serializers.DictField(child=serializers.IntegerField())
    ids = serializers.ListField(child=serializers.IntegerField())


class ImportView(ServiceErrorsMixin, APIView):
    """``/api/dlq/import/``: import (or ``dry_run``: check and count) a JSON Lines export of dead letters as
    parked dead letters of one of the caller's pipelines (operator)."""

    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        request={"multipart/form-data": ImportRequestSerializer},
        responses={200: ImportResultSerializer, 201: ImportResultSerializer},
    )
    def post(self, request: Request) -> Response:
        """Check the file against the pipeline's current revision; 200 with the counts for a dry run, 201
        with what was created otherwise. 400 names the field (each bad line of the file)."""
        announced = request.META.get("CONTENT_LENGTH") or ""
        if announced.isdigit() and int(announced) > imports.IMPORT_MAX_BYTES + _ENVELOPE_BYTES:
            # Refused before the body is read (and spooled to disk by the upload handlers).
            return Response(
                {"file": [f"is larger than {imports.IMPORT_MAX_BYTES:,} bytes; import fewer dead letters"]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        serializer = ImportRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        pipeline = (
            Pipeline.objects.filter(pk=data["pipeline"], team__in=visible_teams(request.user))
            .select_related("team", "current_revision")
            .first()
        )
        if pipeline is None:
            return Response(
                {"pipeline": ["no such pipeline in your teams"]}, status=status.HTTP_400_BAD_REQUEST
            )
        upload: UploadedFile = data["file"]
        result = imports.import_dead_letters(
            actor=request.user,  # type: ignore[arg-type]
            pipeline=pipeline,
            lines=upload.chunks(),
            size=upload.size,
            dry_run=data["dry_run"],
            file_name=upload.name or "",
        )
        return Response(
            ImportResultSerializer(result).data,
            status=status.HTTP_200_OK if result.dry_run else status.HTTP_201_CREATED,
        )
