"""The audit log's REST API (``/api/audit/``): serializers, views and URLs."""
