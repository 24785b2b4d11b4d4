"""Websocket URL patterns, collected from the apps that publish live updates."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
