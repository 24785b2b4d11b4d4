"""URLs of the notifications pages (mounted under /notifications/)."""

from django.urls import path

from notifications import views

urlpatterns = [
    path("", views.index, name="notifications"),
    path("channels/<int:pk>/edit", views.edit, name="notifications-edit"),
    path("channels/<int:pk>/delete", views.delete, name="notifications-delete"),
    path("channels/<int:pk>/test", views.send_test, name="notifications-test"),
    path("<slug:team>/", views.team_page, name="notifications-team"),
    path("<slug:team>/channels", views.create, name="notifications-create"),
]
