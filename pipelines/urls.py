"""URLs of the pipeline pages (mounted at the site root: the overview is the landing page)."""

from django.urls import URLPattern, path

from pipelines import cluster_views, host_views, views

urlpatterns: list[URLPattern] = [
    path("", views.overview, name="overview"),
    path("clusters/", cluster_views.cluster_list, name="cluster-list"),
    path("clusters/new/", cluster_views.cluster_edit, name="cluster-new"),
    path("clusters/<slug:name>/edit/", cluster_views.cluster_edit, name="cluster-edit"),
    path("clusters/<slug:name>/test/", cluster_views.cluster_test, name="cluster-test"),
    path("clusters/<slug:name>/delete/", cluster_views.cluster_delete, name="cluster-delete"),
    path("hosts/", host_views.host_list, name="host-list"),
    path("hosts/<slug:name>/drain/", host_views.host_drain, {"action": "drain"}, name="host-drain"),
    path("hosts/<slug:name>/undrain/", host_views.host_drain, {"action": "undrain"}, name="host-undrain"),
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
