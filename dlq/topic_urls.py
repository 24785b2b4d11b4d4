"""URLs of the topic browser pages (mounted under /pipelines/<name>/)."""

from django.urls import URLPattern, path

from dlq import converters, offset_views, topic_views  # noqa: F401  # converters: registers <partition:> and <offset:>

urlpatterns: list[URLPattern] = [
    path("topics/", topic_views.topic_index, name="pipeline-topics"),
    path("topics/<str:topic>/", topic_views.topic_page, name="pipeline-topic"),
    path("topics/<str:topic>/search/", topic_views.topic_search_rows, name="pipeline-topic-search"),
    path("topics/<str:topic>/tail/", topic_views.topic_tail_rows, name="pipeline-topic-tail"),
    path(
        "topics/<str:topic>/records/<partition:partition>/<offset:offset>/",
        topic_views.record_outcomes_page,
        name="pipeline-record-outcomes",
    ),
    path("test-message/", topic_views.test_message_page, name="pipeline-test-message"),
    path("offsets/", offset_views.offsets_page, name="pipeline-offsets"),
]
