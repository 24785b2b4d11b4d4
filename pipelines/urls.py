"""URLs of the pipeline pages (mounted at the site root: the overview is the landing page)."""

from django.urls import URLPattern, path

from pipelines import views

urlpatterns: list[URLPattern] = [
    path("", views.overview, name="overview"),
    path("pipelines/overview.json", views.overview_json, name="overview-json"),
    path("pipelines/new/", views.pipeline_editor, name="pipeline-new"),
    path(
        "pipelines/draft/dry-run-request/",
        views.draft_dry_run_request,
        name="pipeline-draft-dry-run-request",
    ),
    path("pipelines/draft/sample/", views.draft_sample, name="pipeline-draft-sample"),
    path("pipelines/<slug:name>/", views.pipeline_detail, name="pipeline-detail"),
    path("pipelines/<slug:name>/edit/", views.pipeline_editor, name="pipeline-edit"),
    path("pipelines/<slug:name>/<str:action>/", views.pipeline_action, name="pipeline-action"),
]
