"""StreamForge Web: the Django project (settings, URLs, ASGI and Celery applications)."""

from streamforge_web.celery import app as celery_app

__all__ = ["celery_app"]
