"""Local stack manager: Kafka (KRaft), Redis, web, Celery worker and beat, from the project's own files."""
