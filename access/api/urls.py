"""URLs of the audit API (mounted under /api/): ``audit/`` and ``audit/verify/``."""

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import DefaultRouter

from access.api.views import AuditEventViewSet, AuditVerifyView

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("audit", AuditEventViewSet, basename="audit")

urlpatterns: list[URLPattern | URLResolver] = [
    path("audit/verify/", AuditVerifyView.as_view(), name="audit-verify"),
    *router.urls,
]
