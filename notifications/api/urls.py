"""URLs of the notifications API (mounted under /api/notifications/)."""

from django.urls import URLPattern, URLResolver
from rest_framework.routers import DefaultRouter

from notifications.api.views import ChannelViewSet, DeliveryViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("channels", ChannelViewSet, basename="notification-channel")
router.register("deliveries", DeliveryViewSet, basename="notification-delivery")

urlpatterns: list[URLPattern | URLResolver] = [*router.urls]
