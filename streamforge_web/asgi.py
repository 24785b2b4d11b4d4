"""ASGI entry point: Django for HTTP, Channels for websockets (authenticated by the Django session,
origin-checked against ALLOWED_HOSTS)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "streamforge_web.settings")
# A pool of PostgreSQL connections for this process: under ASGI each request runs in a thread of its own, and
# a thread's persistent connection would be a new connection per request (settings.DB_POOL).
os.environ.setdefault("STREAMFORGE_DB_POOL", "8")
django_asgi_app = get_asgi_application()  # first: it sets Django up before the imports below touch models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from streamforge_web.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
