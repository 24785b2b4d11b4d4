"""The Celery application: Redis broker, configuration from Django settings (``CELERY_*``), tasks
discovered in each app's ``tasks.py``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "streamforge_web.settings")

app = Celery("streamforge_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
