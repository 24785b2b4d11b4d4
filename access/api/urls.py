"""URLs of the access API (mounted under /api/): ``audit/`` and ``audit/verify/``; ``users/``, ``teams/`` and
``teams/{team}/members/``; ``tokens/me/`` and ``tokens/{username}/``; ``sso/group-mappings/`` (and its
``providers/``)."""

from django.urls import URLPattern, URLResolver, path, re_path
from rest_framework.routers import DefaultRouter

from access.api.people import MemberViewSet, TeamViewSet, UserViewSet
from access.api.sso import GroupMappingViewSet
from access.api.tokens import MyTokenView, UserTokenView
from access.api.views import AuditEventViewSet, AuditVerifyView

#: What a user name may hold (Django's username validator), so a path never carries anything else to a query.
USERNAME = r"[\w.@+-]+"

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("audit", AuditEventViewSet, basename="audit")
router.register("users", UserViewSet, basename="user")  # its lookup_value_regex is USERNAME
router.register("teams", TeamViewSet, basename="team")
router.register("sso/group-mappings", GroupMappingViewSet, basename="sso-group-mapping")

members = MemberViewSet.as_view({"get": "list", "post": "create"})
member = MemberViewSet.as_view({"patch": "partial_update", "delete": "destroy"})

urlpatterns: list[URLPattern | URLResolver] = [
    path("audit/verify/", AuditVerifyView.as_view(), name="audit-verify"),
    path("teams/<slug:team>/members/", members, name="team-members"),
    re_path(
        rf"^teams/(?P<team>[-a-zA-Z0-9_]+)/members/(?P<username>{USERNAME})/$", member, name="team-member"
    ),
    path("tokens/me/", MyTokenView.as_view(), name="token-me"),
    re_path(rf"^tokens/(?P<username>{USERNAME})/$", UserTokenView.as_view(), name="token-user"),
    *router.urls,
]
