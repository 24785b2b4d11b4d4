"""URLs of the pipelines API (mounted under /api/)."""

from django.urls import path

from pipelines.api.views import DryRunView, EvaluateView

urlpatterns = [
    path("dsl/evaluate/", EvaluateView.as_view(), name="dsl-evaluate"),
    path("pipelines/<slug:name>/dry-run/", DryRunView.as_view(), name="pipeline-dry-run"),
]
