"""The Django-free core shared by the Spark driver, the control plane, chaos and bench.

It owns what crosses process and system boundaries: the wire contract (``contract``: header names, error
types, Redis keys, exit codes), the Kafka boundary (``kafka``: every client's configuration built in one
place, one ``Record``, the transient-error list, record size, Kafka's topic-name rule), the Redis boundary
(``redis_client``) and ``text`` (is a string encodable as UTF-8, anywhere in decoded JSON).
Nothing here imports Django, pyspark or any app, so the driver runs the same way on a cluster.
"""
