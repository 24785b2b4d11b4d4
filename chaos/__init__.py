"""Fault injection against a running pipeline (``make chaos``): ``python -m chaos run [--quick]``.

One module per fault (kill_driver, broker, redis_outage, bulk_worker, dlq_unwritable, ingest_kill); the
stack (``stack``), the pipelines and producer (``workload``), the per-fault check (``context``) and the
report (``report``) are shared. The accounting identity itself is ``chaos.accounting``.
"""
