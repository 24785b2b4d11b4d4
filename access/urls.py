"""URL of the audit log page (mounted under /audit/)."""

from django.urls import URLPattern, path

from access import views

urlpatterns: list[URLPattern] = [
    path("", views.audit_log, name="audit-log"),
]
