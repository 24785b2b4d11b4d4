"""The console's REST API as the chaos run's operator calls it over HTTP, on a chosen web process: the
multi-host faults act through a web other than the one that started the pipelines (issue #29: every action
reaches the driver wherever it runs, from any web process)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from access.api_tokens import issue_token


@dataclass(frozen=True)
class WebApi:
    """``base_url`` (``http://127.0.0.1:<port>``) with ``token`` (an API token of the run's admin)."""

    base_url: str
    token: str

    @classmethod
    def on_port(cls, port: int, actor: User) -> WebApi:
        """The web on loopback ``port``, as ``actor`` (a fresh token: issuing rotates the previous one, so
        each fault issues its own and never holds one across faults)."""
        return cls(f"http://127.0.0.1:{port}", issue_token(actor=actor))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        """JSON answer of ``method path`` (``/api/...``). Raises urllib.error.HTTPError for 4xx/5xx and
        OSError when the web does not answer."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)  # noqa: S310 - loopback
        request.add_header("Authorization", f"Token {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
            payload = response.read()
        return json.loads(payload) if payload else None

    def healthy(self) -> bool:
        """Whether the web answers ``/healthz`` with 200 within 5 s."""
        try:
            with urllib.request.urlopen(self.base_url + "/healthz", timeout=5) as response:  # noqa: S310
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False
