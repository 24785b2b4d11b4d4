"""URLs of the DLQ console pages (mounted under /dlq/)."""

from django.urls import URLPattern, path

from dlq import fix_forward_views, import_views, redrive_views, views

urlpatterns: list[URLPattern] = [
    path("", views.message_list, name="dlq-list"),
    path("messages/<int:pk>/", views.message_detail, name="dlq-message"),
    path("groups/", views.group_list, name="dlq-groups"),
    path("bulk/", views.bulk, name="dlq-bulk"),
    path("bulk/<int:pk>/", redrive_views.bulk_detail, name="dlq-bulk-action"),
    path("approvals/", views.approval_list, name="dlq-approvals"),
    path("retention/", views.retention, name="dlq-retention"),
    path("import/", import_views.import_page, name="dlq-import"),
    path("fix-forward/", fix_forward_views.fix_forward_list, name="dlq-fix-forward"),
    path("fix-forward/start/", fix_forward_views.fix_forward_start, name="dlq-fix-forward-start"),
    path("fix-forward/<int:pk>/", fix_forward_views.fix_forward_detail, name="dlq-fix-forward-scan"),
    path("redrive/", redrive_views.redrive_list, name="dlq-redrive"),
    path("redrive/create/", redrive_views.redrive_create, name="dlq-redrive-create"),
    path("redrive/<int:pk>/", redrive_views.redrive_detail, name="dlq-redrive-policy"),
    path("redrive/<int:pk>/edit/", redrive_views.redrive_edit, name="dlq-redrive-edit"),
]
