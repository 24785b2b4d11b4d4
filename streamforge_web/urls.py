"""URL configuration: pages, log in/out, the admin, the REST API and its OpenAPI schema, the probes."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from access import people_views
from access.sso import logout as sso_logout
from access.sso import views as sso_views
from dlq import group_views
from dlq.api import topics
from pipelines.metrics import metrics_view
from streamforge_web import health, views

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("status/", views.system_status, name="system-status"),
    # Log in with a password or through an identity provider; log out here and, after SSO, there too.
    path("login/", sso_views.SignInView.as_view(), name="login"),
    path("logout/", sso_logout.sign_out, name="logout"),
    path("", include("access.sso.urls")),
    path("admin/", admin.site.urls),
    # The topic browser and test messages live in the dlq app (their masking is the DLQ console's) but are
    # addressed under the pipeline; these come first so the pipelines' own routes do not take them.
    path("api/pipelines/<slug:name>/", include("dlq.api.topic_urls")),
    path("pipelines/<slug:name>/", include("dlq.topic_urls")),
    # The consumer groups of the team's topics (issue #30): page and API.
    path("consumer-groups/", group_views.consumer_group_list, name="consumer-groups"),
    path("api/consumer-groups/", topics.ConsumerGroupsView.as_view(), name="consumer-groups-api"),
    path("api/", include("pipelines.api.urls")),
    path("api/dlq/", include("dlq.api.urls")),
    path("api/notifications/", include("notifications.api.urls")),
    path("notifications/", include("notifications.urls")),
    path("api/", include("access.api.urls")),
    path("dlq/", include("dlq.urls")),
    path("audit/", include("access.urls")),
    path("people/", people_views.people_page, name="people"),
    path("account/", people_views.account_page, name="account"),
    path("", include("pipelines.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (?script), not inline: the page runs under
    # the site's Content-Security-Policy like every other, with Swagger UI itself from drf-spectacular-sidecar.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api/swagger_ui.html"),
        name="api-docs",
    ),
]
