"""URLs of the pipelines API (mounted under /api/)."""

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import DefaultRouter

from pipelines.api.clusters import ClusterViewSet
from pipelines.api.hosts import HostViewSet
from pipelines.api.views import DraftDryRunView, DryRunView, EvaluateView, PipelineViewSet, ValidateView

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("pipelines", PipelineViewSet, basename="pipeline")
router.register("clusters", ClusterViewSet, basename="kafka-cluster")
router.register("hosts", HostViewSet, basename="runner-host")

urlpatterns: list[URLPattern | URLResolver] = [
    path("dsl/evaluate/", EvaluateView.as_view(), name="dsl-evaluate"),
    path("dsl/validate/", ValidateView.as_view(), name="dsl-validate"),
    path("dsl/dry-run/", DraftDryRunView.as_view(), name="draft-dry-run"),
    path("pipelines/<slug:name>/dry-run/", DryRunView.as_view(), name="pipeline-dry-run"),
    *router.urls,
]
