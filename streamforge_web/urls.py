"""URL configuration: pages, log in/out, the admin, the REST API and its OpenAPI schema, the probes."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from dlq import views as dlq_views
from pipelines.metrics import metrics_view
from streamforge_web import health, views
from streamforge_web.audit_api import AuditEventViewSet, AuditVerifyView

audit_router = DefaultRouter(trailing_slash=True)
audit_router.include_root_view = False
audit_router.register("audit", AuditEventViewSet, basename="audit")

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("status/", views.system_status, name="system-status"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("pipelines.api.urls")),
    path("api/dlq/", include("dlq.api.urls")),
    path("api/audit/verify/", AuditVerifyView.as_view(), name="audit-verify"),
    path("api/", include(audit_router.urls)),
    path("dlq/", include("dlq.urls")),
    path("audit/", dlq_views.audit_log, name="audit-log"),
    path("", include("pipelines.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
