"""Diagnostic tasks for operators and probes."""

from __future__ import annotations

import os
import socket
import time
from typing import TypedDict

from celery import shared_task


class PingReply(TypedDict):
    """Who answered a ping: worker host name, process id, and the worker's clock in epoch milliseconds."""

    host: str
    pid: int
    time_ms: int


@shared_task(name="streamforge.ping")
def ping() -> PingReply:
    """Answer with the worker's identity: proves a task went through the broker and a result came back."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "time_ms": int(time.time() * 1000)}
