"""REST API of notifications (mounted under /api/notifications/): channels (list, create, read, change,
delete, send a test) and delivery attempts. Thin: input through a serializer, then ``notifications.channels``.
Another team's channel is a 404; a member who may not manage gets 403 on mutations; bad input is a 400
naming the field."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from access.permissions import visible_teams
from dlq.api.views import ServiceErrorsMixin
from dlq.services.errors import InvalidRequest
from notifications import channels
from notifications.api.serializers import (
    ChannelCreateSerializer,
    ChannelSerializer,
    ChannelUpdateSerializer,
    CreatedChannelSerializer,
    DeliverySerializer,
)
from notifications.models import Channel, DeliveryAttempt


class NewestDeliveriesFirst(CursorPagination):
    """Keyset pagination on id, newest first; ``page_size`` up to 200."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class ChannelViewSet(
    ServiceErrorsMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Channel],
):
    """A team's notification channels."""

    permission_classes = [IsAuthenticated]
    serializer_class = ChannelSerializer
    pagination_class = None
    lookup_value_regex = "[0-9]+"  # an id: anything else names no channel (a 404), as in every viewset

    def get_queryset(self) -> QuerySet[Channel]:
        qs = channels.visible_channels(self.request.user)
        team = self.request.query_params.get("team")
        return qs.filter(team__name=team) if team else qs

    @extend_schema(parameters=[OpenApiParameter("team", str, description="team name")])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Channels of the caller's teams."""
        return super().list(request, *args, **kwargs)

    @extend_schema(request=ChannelCreateSerializer, responses={201: CreatedChannelSerializer})
    def create(self, request: Request) -> Response:
        """Add a channel; a webhook's signing secret is in this answer only."""
        data = _valid(ChannelCreateSerializer(data=request.data))
        team = visible_teams(request.user).filter(name=data.pop("team")).first()
        if team is None:
            raise InvalidRequest("team", "no such team among yours")
        created = channels.create_channel(actor=request.user, team=team, **data)  # type: ignore[arg-type]
        body = {**ChannelSerializer(created.channel).data, "signing_secret": created.signing_secret}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=ChannelUpdateSerializer, responses={200: ChannelSerializer})
    def partial_update(self, request: Request, pk: str) -> Response:
        """Change subscriptions, the on/off switch, the address or the recipients."""
        channel = self.get_object()
        data = _valid(ChannelUpdateSerializer(data=request.data))
        channel = channels.update_channel(actor=request.user, channel=channel, **data)  # type: ignore[arg-type]
        return Response(ChannelSerializer(channel).data)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        """Delete the channel and its delivery history."""
        channels.delete_channel(actor=request.user, channel=self.get_object())  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={201: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str) -> Response:
        """Send a test message now and answer with the delivery attempt (ok or not)."""
        row = channels.send_test(actor=request.user, channel=self.get_object())  # type: ignore[arg-type]
        return Response(DeliverySerializer(row).data, status=status.HTTP_201_CREATED)


class DeliveryViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[DeliveryAttempt]):
    """Delivery attempts of the caller's teams' channels, newest first."""

    permission_classes = [IsAuthenticated]
    serializer_class = DeliverySerializer
    pagination_class = NewestDeliveriesFirst

    def get_queryset(self) -> QuerySet[DeliveryAttempt]:
        qs = DeliveryAttempt.objects.filter(
            channel__team__in=visible_teams(self.request.user)
        ).select_related("channel", "notification")
        channel = self.request.query_params.get("channel", "")
        if channel:
            if not channel.isdigit():
                raise InvalidRequest("channel", "a channel id")
            qs = qs.filter(channel_id=int(channel))
        return qs

    @extend_schema(parameters=[OpenApiParameter("channel", int, description="channel id")])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Delivery attempts, newest first."""
        try:
            return super().list(request, *args, **kwargs)
        except InvalidRequest as exc:
            return Response({exc.field: [exc.message]}, status=status.HTTP_400_BAD_REQUEST)


def _valid(serializer: BaseSerializer[Any]) -> dict[str, Any]:
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
