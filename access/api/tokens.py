"""``/api/tokens/me/``: the caller's API token, and ``/api/tokens/{username}/``: anyone's, for admins to
revoke. Over ``access.api_tokens``.

``POST tokens/me/`` creates the token, or rotates it (the old key stops working at once), and answers its key:
the only time the key is ever shown. ``GET`` answers its first characters and creation time only; ``DELETE``
revokes it. Admins ``DELETE tokens/{username}/`` to revoke another user's (404 for no such user, 403 for
non-admins).
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access import api_tokens
from access.permissions import is_admin


class TokenInfoSerializer(serializers.Serializer[dict[str, object]]):
    """The caller's token as it may be shown: whether there is one, the key's first characters and when it
    was created (null without a token). Never the key."""

    exists = serializers.BooleanField()
    prefix = serializers.CharField(allow_null=True, help_text=f"the key's first {api_tokens.PREFIX_LENGTH}")
    created = serializers.DateTimeField(allow_null=True)


class NewTokenSerializer(serializers.Serializer[dict[str, object]]):
    """A token just created: its ``key``, shown this once and never again."""

    key = serializers.CharField(help_text="send as 'Authorization: Token <key>'; shown only now")
    prefix = serializers.CharField()
    created = serializers.DateTimeField()


def _shown(info: api_tokens.TokenInfo | None) -> dict[str, object]:
    if info is None:
        return {"exists": False, "prefix": None, "created": None}
    return {"exists": True, "prefix": info.prefix, "created": info.created}


class MyTokenView(APIView):
    """``/api/tokens/me/``: read (prefix only), create or rotate, and revoke the caller's API token."""

    @extend_schema(responses={200: TokenInfoSerializer})
    def get(self, request: Request) -> Response:
        """Whether the caller has a token, its first characters and creation time."""
        actor = request.user
        assert isinstance(actor, User)  # IsAuthenticated let only users in
        return Response(TokenInfoSerializer(_shown(api_tokens.token_info(actor))).data)

    @extend_schema(request=None, responses={201: NewTokenSerializer})
    def post(self, request: Request) -> Response:
        """Create the caller's token, replacing any they had; the answer holds the key, shown only now."""
        actor = request.user
        assert isinstance(actor, User)  # IsAuthenticated let only users in
        key = api_tokens.issue_token(actor=actor)
        info = api_tokens.token_info(actor)
        assert info is not None
        body = {"key": key, "prefix": info.prefix, "created": info.created}
        return Response(NewTokenSerializer(body).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def delete(self, request: Request) -> Response:
        """Revoke the caller's token (nothing to do without one)."""
        actor = request.user
        assert isinstance(actor, User)
        api_tokens.revoke_token(actor=actor, user=actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class UserTokenView(APIView):
    """``/api/tokens/{username}/`` (admins): revoke another user's API token."""

    @extend_schema(responses={204: None})
    def delete(self, request: Request, username: str) -> Response:
        """Revoke ``username``'s token; 403 for non-admins, 404 for no such user."""
        actor = request.user
        assert isinstance(actor, User)
        if not is_admin(actor):
            self.permission_denied(request, message="only admins revoke another user's API token")
        user = User.objects.filter(username=username).first()
        if user is None:
            raise Http404("no such user")
        api_tokens.revoke_token(actor=actor, user=user)
        return Response(status=status.HTTP_204_NO_CONTENT)
