"""Names other parts rely on (../shared/DESIGN.md, "Contracts"): DLQ and lineage headers, error types, the
Redis keys of progress and heartbeats, the driver's exit codes. Plain Python: the driver, the control plane
and the DLQ ingest all import it.
"""

from __future__ import annotations

from typing import Final

# --- DLQ record headers (UTF-8 text values), written by the driver -----------------------------------------
H_ERROR: Final = "x-streamforge-error"
H_ERROR_TYPE: Final = "x-streamforge-error-type"
H_SOURCE_TOPIC: Final = "x-streamforge-source-topic"
H_SOURCE_PARTITION: Final = "x-streamforge-source-partition"
H_SOURCE_OFFSET: Final = "x-streamforge-source-offset"
H_TIMESTAMP: Final = "x-streamforge-timestamp"
H_PIPELINE: Final = "x-streamforge-pipeline"
H_DESTINATION: Final = "x-streamforge-destination"
H_FILTER: Final = "x-streamforge-filter"
H_TRANSFORM: Final = "x-streamforge-transform"
H_REVISION: Final = "x-streamforge-revision"
H_ATTEMPTS: Final = "x-streamforge-attempts"
H_STACK_TRACE: Final = "x-streamforge-stack-trace"

# --- replay headers, added by the console to a replayed record ---------------------------------------------
H_REPLAY_ID: Final = "x-streamforge-replay-id"
H_REPLAY_OF: Final = "x-streamforge-replay-of"
H_REPLAYED_BY: Final = "x-streamforge-replayed-by"
#: Comma-separated destination names a replayed record is for; the others count it as replay-skipped.
H_REPLAY_DESTINATIONS: Final = "x-streamforge-replay-destinations"
#: The console's HMAC over the two headers above and the value (``streamforge_core.replay_signing``): a driver
#: honours them only when it verifies, since any producer to a source topic can write them.
H_REPLAY_SIGNATURE: Final = "x-streamforge-replay-signature"

# --- offset skips: on the copies of skipped records the console writes to the DLQ ----------------------------
#: The offset skip that copied the record (``dlq.models.OffsetSkip`` id): several copies of one source record
#: (a re-run after a crash) are recognisable as one.
H_SKIP: Final = "x-streamforge-skip"
#: The skipped record's own timestamp, ``<epoch ms>`` (the copy itself is stamped by the broker when written,
#: so the DLQ topic's retention counts from the copy, not from the old record).
H_SOURCE_RECORD_TIMESTAMP: Final = "x-streamforge-source-timestamp"

# --- lineage on produced records: "topic/partition/offset" of the source record ---------------------------
# Lets anyone holding only the outputs prove which source offsets arrived (the accounting identity).
H_LINEAGE: Final = "x-streamforge-source"

# --- test messages, produced by the console to a pipeline's source topic -----------------------------------
#: Marks a record as a test message; the value is the username of who produced it. The pipeline processes
#: it like any other record (the header passes through to the destinations unless a transform drops it).
#: Information for people downstream only: any producer can write it, so the console decides who sent a
#: test message from its own record (``dlq.models.ProducedTestMessage``), never from this header.
H_TEST: Final = "x-streamforge-test"

#: The destination name on a DLQ record whose failure concerns every destination (the value did not decode).
ALL_DESTINATIONS: Final = "*"

# --- error types (StreamForge spec) --------------------------------------------------------------------------
MESSAGE_DESERIALIZATION: Final = "MessageDeserialization"
FILTER_EVALUATION: Final = "FilterEvaluation"
TRANSFORM_EVALUATION: Final = "TransformEvaluation"
JSON_PATH_NOT_FOUND: Final = "JsonPathNotFound"
DECOMPRESSION: Final = "Decompression"
RECORD_TOO_LARGE: Final = "RecordTooLarge"
RETRY_EXHAUSTED: Final = "RetryExhausted"
#: A transformed record that does not fit its destination subject's schema (DESIGN.md "Record formats").
SCHEMA_VALIDATION: Final = "SchemaValidation"
#: A record an operator moved the pipeline past (``dlq.services.offset_skips``): the console copied it to the DLQ
#: first, so it is parked, never lost. Written by the console, never by a driver.
SKIPPED: Final = "Skipped"
DLQ_ERROR_TYPES: Final = (
    MESSAGE_DESERIALIZATION,
    FILTER_EVALUATION,
    TRANSFORM_EVALUATION,
    JSON_PATH_NOT_FOUND,
    DECOMPRESSION,
    RECORD_TOO_LARGE,
    RETRY_EXHAUSTED,
    SCHEMA_VALIDATION,
    SKIPPED,
)
# These halt the pipeline instead of dead-lettering: never silently drop.
CONFIG: Final = "Config"
DSL_PARSE: Final = "DslParse"
DEAD_LETTER_QUEUE: Final = "DeadLetterQueue"
HALT_ERROR_TYPES: Final = (CONFIG, DSL_PARSE, DEAD_LETTER_QUEUE)

# --- Redis keys -----------------------------------------------------------------------------------------------
#: One stream for every pipeline's per-batch progress events (JSON in the ``event`` field).
PROGRESS_STREAM: Final = "streamforge:progress"
PROGRESS_STREAM_MAXLEN: Final = 200_000


def heartbeat_key(pipeline: str) -> str:
    """Redis key holding the running driver's latest heartbeat JSON (expires when the driver stops beating)."""
    return f"streamforge:heartbeat:{pipeline}"


def exit_key(pipeline: str, run_id: str) -> str:
    """Redis key holding a driver run's exit report JSON."""
    return f"streamforge:exit:{pipeline}:{run_id}"


# --- driver exit codes -----------------------------------------------------------------------------------------
EXIT_STOPPED: Final = 0  # stopped on request, every finished batch committed
EXIT_CRASHED: Final = 1  # an unexpected error: the supervisor may restart with backoff
EXIT_CONFIG: Final = 2  # Config / DslParse: restarting cannot help
EXIT_DLQ: Final = 3  # DeadLetterQueue: the DLQ could not be written; halted with nothing committed
EXIT_FENCED: Final = 4  # Fenced: its lease expired or was taken over; stopped before committing another batch
EXIT_REASON_MARKER: Final = "STREAMFORGE_EXIT "  # prefix of the driver's last stderr line (JSON follows)


class PipelineHalt(RuntimeError):
    """A non-recoverable condition: the query must stop, commit nothing for the batch, and not be restarted
    automatically. ``error_type`` is one of HALT_ERROR_TYPES. The message carries a marker so the driver can
    recognise it after Spark has wrapped it in its own exceptions (Python worker -> JVM -> driver)."""

    def __init__(self, error_type: str, message: str) -> None:
        self.error_type = error_type
        self.detail = message
        super().__init__(f"{halt_marker(error_type)} {message}")


def halt_marker(error_type: str) -> str:
    """The text that identifies a PipelineHalt of ``error_type`` inside any wrapped exception message."""
    return f"[streamforge-halt:{error_type}]"


FENCED_MARKER: Final = "[streamforge-fenced]"


class Fenced(RuntimeError):
    """The driver no longer holds its pipeline's lease (expired, superseded by a higher epoch, or released):
    it must stop without committing the batch in hand, so the checkpoint and the consumer group are written by
    the lease holder only. The message starts with ``FENCED_MARKER``, recognisable after Spark has wrapped it
    (Python worker -> JVM -> driver). The driver exits ``EXIT_FENCED``; supervision does not count it as a
    failure: the pipeline already runs elsewhere."""

    def __init__(self, message: str) -> None:
        self.detail = message
        super().__init__(f"{FENCED_MARKER} {message}")
