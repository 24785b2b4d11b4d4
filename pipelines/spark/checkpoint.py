"""Reading and moving the Kafka source offsets in a Structured Streaming checkpoint (a local folder), for the
console's offset skip (``dlq.services.offset_skips``). Django-free, like the rest of ``pipelines.spark``.

The files, as Spark 4.2 writes them for the driver's one Kafka source (``apache/spark``,
``sql/core/.../streaming/checkpointing/OffsetSeqLog.scala`` and ``CommitLog.scala``;
``connector/kafka-0-10-sql/.../KafkaSourceOffset.scala``):

- ``offsets/<batch>``: line 1 the version (``v1``); line 2 the ``OffsetSeqMetadata`` JSON
  (``batchWatermarkMs``, ``batchTimestampMs``, ``conf``); then one line per source, here the Kafka source's
  ``{"topic": {"partition": next offset}}`` (``JsonUtils.partitionOffsets``). Written when a batch is
  planned: the batch reads up to these offsets.
- ``commits/<batch>``: line 1 the version (``v1``, or ``v2`` for state-store checkpoint format 2); line 2 its
  JSON (``{"nextBatchWatermarkMs":0}``). Written after the batch's sink returned.

On start, ``MicroBatchExecution`` takes the newest ``offsets/<n>``; with ``commits/<n>`` present, batch n is
done and batch n+1 starts from ``offsets/<n>``; without it, batch n is run again from ``offsets/<n-1>``.
So moving positions is: one more planned-and-committed batch ``n+1`` whose offsets are the moved ones
(``move``). That batch carries no records and is never run; the pipeline here is stateless (``foreachBatch``
or the Kafka sink, no state store), so nothing else in the checkpoint refers to batch ids.

Hadoop's local file system writes a ``.<name>.crc`` beside each file and checks it when present; the files
written here get none (absent, nothing is checked), and the ``.crc`` of a file removed here goes with it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

Offsets = dict[tuple[str, int], int]


class CheckpointError(Exception):
    """The checkpoint is missing, not in the format read here, or cannot be changed safely."""


@dataclass(frozen=True)
class CommittedPosition:
    """Where the query resumes: the newest committed batch id and its Kafka offsets per (topic, partition)
    (the next offset to read); ``uncommitted`` is the id of a newer planned batch without a commit, or None."""

    batch_id: int
    offsets: Offsets
    uncommitted: int | None = None


def _batches(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _read_offsets_file(path: Path) -> tuple[str, str, Offsets]:
    lines = path.read_text(encoding="utf-8").split("\n")
    if len(lines) < 3 or lines[0] != "v1":
        raise CheckpointError(f"{path}: not a Spark offset log entry of version v1 (found {lines[0]!r})")
    if len(lines) != 3:
        raise CheckpointError(
            f"{path}: {len(lines) - 2} sources; only a query with one Kafka source is moved"
        )
    try:
        data = json.loads(lines[2])
        offsets = {
            (topic, int(partition)): int(offset)
            for topic, partitions in data.items()
            for partition, offset in partitions.items()
        }
    except (ValueError, AttributeError, TypeError) as exc:
        raise CheckpointError(f"{path}: the source offsets are not Kafka offsets: {exc}") from None
    return lines[0], lines[1], offsets


def committed_position(location: Path) -> CommittedPosition:
    """The position the query resumes from (``CommittedPosition``), read from the checkpoint folder
    ``location``. Raises CheckpointError when there is no committed batch (the pipeline never completed
    one: there is nothing to move, its start takes ``startingOffsets``) or the files are not Spark 4's v1
    format with one Kafka source."""
    offsets_dir, commits_dir = location / "offsets", location / "commits"
    committed = set(_batches(commits_dir))
    planned = _batches(offsets_dir)
    done = [b for b in planned if b in committed]
    if not done:
        raise CheckpointError(f"{location}: no committed batch (the pipeline has not completed a batch yet)")
    newest = done[-1]
    later = [b for b in planned if b > newest]
    _version, _meta, offsets = _read_offsets_file(offsets_dir / str(newest))
    return CommittedPosition(newest, offsets, later[0] if later else None)


def _write_new(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` which must not exist: a temporary file renamed into place (atomic on one
    file system), as Spark's ``CheckpointFileManager`` does; FileExistsError when it exists."""
    if path.exists():
        raise FileExistsError(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    with tmp.open("rb") as handle:
        os.fsync(handle.fileno())
    os.link(tmp, path)  # fails if someone wrote the entry meanwhile, unlike a rename
    tmp.unlink()


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def move(location: Path, moved: Offsets, *, now_ms: int | None = None) -> int:
    """Make the query resume from ``moved`` (next offset per (topic, partition); partitions not named keep
    theirs): write ``offsets/<n+1>`` (the newest committed batch's version and metadata, its
    ``batchTimestampMs`` set to ``now_ms``, the offsets with ``moved`` applied, topics and partitions in
    order) and then ``commits/<n+1>`` (a copy of ``commits/<n>``). Returns n+1.

    A newer planned batch without a commit (a driver stopped or killed after planning it) is removed
    first: it would be run again from batch n's offsets otherwise, and its records are re-read from the
    moved position anyway. The caller must make sure no driver runs on the checkpoint. Raises
    CheckpointError (see ``committed_position``; a partition not in the checkpoint), OSError."""
    position = committed_position(location)
    unknown = sorted(set(moved) - set(position.offsets))
    if unknown:
        raise CheckpointError(f"{location}: the checkpoint has no offset for {unknown}")
    offsets_dir, commits_dir = location / "offsets", location / "commits"
    if position.uncommitted is not None:
        for batch in _batches(offsets_dir):
            if batch > position.batch_id:
                _remove(offsets_dir / str(batch))
    version, meta, offsets = _read_offsets_file(offsets_dir / str(position.batch_id))
    metadata = json.loads(meta) if meta.strip() else {}
    metadata["batchTimestampMs"] = now_ms if now_ms is not None else int(time.time() * 1000)
    offsets.update(moved)
    by_topic: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, {})[str(partition)] = offset
    new = position.batch_id + 1
    commit = (commits_dir / str(position.batch_id)).read_text(encoding="utf-8")
    _write_new(
        offsets_dir / str(new),
        "\n".join(
            [
                version,
                json.dumps(metadata, separators=(",", ":")),
                json.dumps(by_topic, separators=(",", ":")),
            ]
        ),
    )
    _write_new(commits_dir / str(new), commit)
    return new
