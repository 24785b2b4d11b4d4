"""System checks for the default Kafka cluster's settings (``manage.py check``); registered when
``PipelinesConfig.ready()`` imports this module."""

from __future__ import annotations

import os
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register


@register(Tags.security)
def default_cluster_plain_over_plaintext_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """SASL ``PLAIN`` over ``SASL_PLAINTEXT`` sends the default cluster's password to the broker in clear (RFC
    4616 section 4: PLAIN must run over a protected channel); refused for the default cluster as for named
    ones (security review #28, finding 2). An Error, so ``manage.py check`` and every server start fail."""
    protocol = os.environ.get("KAFKA_SECURITY_PROTOCOL", "").strip().upper()
    mechanism = os.environ.get("KAFKA_SASL_MECHANISM", "").strip().upper()
    if protocol == "SASL_PLAINTEXT" and mechanism == "PLAIN":
        return [
            Error(
                "KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT with KAFKA_SASL_MECHANISM=PLAIN sends the default "
                "cluster's password in clear.",
                hint="Use SASL_SSL (TLS), or a SCRAM mechanism.",
                id="pipelines.E001",
            )
        ]
    return []
