"""The Celery application: Redis broker, configuration from Django settings (``CELERY_*``), tasks
discovered in each app's ``tasks.py``; and, on a runner host (``STREAMFORGE_RUNNER_NAME`` set), the host
agent bootstep."""

import os
import threading
from typing import Any

from celery import Celery, bootsteps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "streamforge_web.settings")

app = Celery("streamforge_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class HostAgent(bootsteps.StartStopStep):
    """Makes a worker a runner host when ``settings.RUNNER_NAME`` is set; does nothing otherwise.

    * Its queue: the worker also consumes ``pipelines.supervision.processes.host_queue(RUNNER_NAME)``
      (``<STREAMFORGE_CELERY_QUEUE>.runner.<name>``), added to whatever it was told to read (the shared default
      queue, or the ``-Q`` list), so a plain ``celery -A streamforge_web worker`` with
      ``STREAMFORGE_RUNNER_NAME=x`` reads both. Added when the step is created, after the worker selected its
      queues and before its consumer starts (Celery "Extensions and Bootsteps":
      https://docs.celeryq.dev/en/stable/userguide/extending.html).
    * The agent: ``start`` runs ``pipelines.supervision.agent.run_agent`` in a daemon thread of the worker's
      main process (a tick every ``HOST_TICK_SECONDS``); ``stop`` ends it (waits up to one tick for it)."""

    label = "host agent"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        from django.conf import settings

        from pipelines.supervision.processes import host_queue

        super().__init__(worker, **kwargs)
        self.runner: str | None = settings.RUNNER_NAME
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.runner:
            worker.app.amqp.queues.select_add(host_queue(self.runner))

    def start(self, worker: Any) -> None:
        """Start the agent thread (runners only)."""
        if not self.runner:
            return
        from pipelines.supervision.agent import run_agent

        self._stop.clear()
        self._thread = threading.Thread(
            target=run_agent, args=(self._stop,), name=f"host-agent-{self.runner}", daemon=True
        )
        self._thread.start()

    def stop(self, worker: Any) -> None:
        """Ask the agent thread to end and wait for its current tick."""
        from django.conf import settings

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=settings.HOST_TICK_SECONDS + 10)
            self._thread = None


app.steps["worker"].add(HostAgent)
