"""Ending a superseded run's Spark application on a standalone master, so its executors free their cores.

A driver frozen or cut off on a lost host keeps its application registered with the standalone master for
as long as its connection to the master looks alive (a SIGSTOPped process's sockets do), and with it its
executors and their cores (``spark.cores.max``). The run that takes its pipeline over then waits for cores
("Initial job has not accepted any resources"): on a cluster sized for the running pipelines, a partitioned
host's worth of takeovers can starve. So when a reconcile ends a run ``HostLost``, it asks the master to
kill that run's application (``spark_app_id``, from the driver's heartbeats): the master UI's
``POST /app/kill/`` with ``terminate=true`` (Spark's ``MasterWebUI``; needs ``spark.ui.killEnabled``, on by
default), which removes the application and its executors. A thawed driver then finds its context stopped.

Only for ``spark://`` masters with ``STREAMFORGE_SPARK_MASTER_UI_URL`` set; a failure is logged, not raised:
the lease already fences the old driver, and this only frees cluster capacity sooner.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.parse
import urllib.request

from django.conf import settings

log = logging.getLogger("pipelines.supervision")

#: How long the master may take to answer a kill, in seconds.
KILL_TIMEOUT_SECONDS = 3.0


def kill_application(app_id: str) -> bool:
    """Ask the standalone master (``settings.SPARK_MASTER_UI_URL``) to kill application ``app_id``
    ("app-<yyyyMMddHHmmss>-<nnnn>"). True when the master accepted the request (it answers a redirect to its
    front page, followed here, also for an application it no longer has); False when there is nothing to
    ask (not a standalone master, no UI URL, no application id) or the master could not be reached (logged)."""
    base = settings.SPARK_MASTER_UI_URL
    if not (app_id and base and settings.SPARK_MASTER.startswith("spark://")):
        return False
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        log.warning("STREAMFORGE_SPARK_MASTER_UI_URL is not an http(s) URL: %s not killed", app_id)
        return False
    body = urllib.parse.urlencode({"id": app_id, "terminate": "true"}).encode()
    url = f"{base.rstrip('/')}/app/kill/"
    request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310 (http(s) only, above)
    try:
        with urllib.request.urlopen(request, timeout=KILL_TIMEOUT_SECONDS) as answer:  # noqa: S310
            answer.read()
    except (urllib.error.URLError, OSError) as error:
        log.warning("could not ask the Spark master to kill %s: %s", app_id, error)
        return False
    log.info("asked the Spark master to kill %s (its run was superseded)", app_id)
    return True
