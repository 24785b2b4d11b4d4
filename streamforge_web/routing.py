"""Websocket URL patterns, collected from the apps that publish live updates."""

from django.urls import URLPattern, path

from dlq.consumers import DlqUpdatesConsumer
from pipelines.consumers import PipelineUpdatesConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/pipelines/", PipelineUpdatesConsumer.as_asgi()),
    path("ws/pipelines/<slug:name>/", PipelineUpdatesConsumer.as_asgi()),
    path("ws/dlq/", DlqUpdatesConsumer.as_asgi()),
]
