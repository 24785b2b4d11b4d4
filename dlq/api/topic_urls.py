"""URLs of the topic browser and test message API (mounted under /api/pipelines/<name>/)."""

from django.urls import URLPattern, path

from dlq import converters  # noqa: F401  # registers <partition:> and <offset:>
from dlq.api import offsets, topics

urlpatterns: list[URLPattern] = [
    path("topics/", topics.OwnedTopicsView.as_view(), name="pipeline-topics-api"),
    path("topics/<str:topic>/", topics.TopicView.as_view(), name="pipeline-topic-api"),
    path(
        "topics/<str:topic>/messages/", topics.TopicMessagesView.as_view(), name="pipeline-topic-messages-api"
    ),
    path("topics/<str:topic>/search/", topics.TopicSearchView.as_view(), name="pipeline-topic-search-api"),
    path("topics/<str:topic>/tail/", topics.TopicTailView.as_view(), name="pipeline-topic-tail-api"),
    path("topics/<str:topic>/groups/", topics.TopicGroupsView.as_view(), name="pipeline-topic-groups-api"),
    path(
        "topics/<str:topic>/records/<partition:partition>/<offset:offset>/outcomes/",
        topics.RecordOutcomesView.as_view(),
        name="pipeline-record-outcomes-api",
    ),
    path("test-messages/", topics.TestMessagesView.as_view(), name="pipeline-test-messages-api"),
    path("offsets/skip/", offsets.OffsetSkipsView.as_view(), name="pipeline-offset-skips-api"),
]
