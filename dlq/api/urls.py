"""URLs of the DLQ console API (mounted under /api/dlq/)."""

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import DefaultRouter

from dlq.api.imports import ImportView
from dlq.api.redrive import RedrivePolicyViewSet
from dlq.api.views import (
    ApprovalViewSet,
    BulkViewSet,
    DeadLetterViewSet,
    DlqTopicViewSet,
    FailureGroupViewSet,
    FixForwardViewSet,
    RetentionView,
    RunbookViewSet,
)

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("messages", DeadLetterViewSet, basename="dlq-message")
router.register("approvals", ApprovalViewSet, basename="dlq-approval")
router.register("groups", FailureGroupViewSet, basename="dlq-group")
router.register("bulk", BulkViewSet, basename="dlq-bulk")
router.register("fix-forward", FixForwardViewSet, basename="dlq-fix-forward")
router.register("redrive-policies", RedrivePolicyViewSet, basename="dlq-redrive-policy")
router.register("runbooks", RunbookViewSet, basename="dlq-runbook")
router.register("topics", DlqTopicViewSet, basename="dlq-topic")

urlpatterns: list[URLPattern | URLResolver] = [
    path("retention/", RetentionView.as_view(), name="dlq-retention-api"),
    path("import/", ImportView.as_view(), name="dlq-import-api"),
    *router.urls,
]
