"""The console's signature on the replay headers it sends (security review #28, finding 4).

A replayed record carries ``x-streamforge-replay-of`` and, when it is for some destinations only,
``x-streamforge-replay-destinations``; a pipeline's driver then writes it only there and counts it as
replay-skipped at the others. Anyone who can produce to a source topic can write those headers, so on their
own they would let a producer make a record skip destinations (or, naming another pipeline's DLQ topic, every
destination). The console therefore adds ``x-streamforge-replay-signature``: an HMAC-SHA256 (RFC 2104) under
the installation's replay key of the two header values and the SHA-256 of the record's value. A driver honours
the replay headers only when the signature verifies; otherwise the record is an ordinary one, for every
destination, so a forged or copied header can cost a duplicate at most, never a lost record.

One key per installation (every web process, worker and driver has it), not one per pipeline: a replay sent
to a source topic that two pipelines read must be recognised by both, so that the one whose dead letter it is
not skips it. Pure functions, no Django: the driver, the writer, the Spark plan (``pipelines.spark.routing``
computes the same HMAC from Spark expressions) and the accounting identity use them.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

__all__ = ["KEY_ENV", "MESSAGE_PREFIX", "hmac_pads", "sign", "signed_message", "verify"]

#: The driver's environment variable holding the replay key (its text; the key is its UTF-8 bytes).
KEY_ENV: Final = "STREAMFORGE_REPLAY_KEY"
#: Versions the signed message's layout.
MESSAGE_PREFIX: Final = b"streamforge-replay-v1\x00"


def signed_message(replay_of: str, destinations: str, value: bytes | None) -> bytes:
    """The bytes the signature covers: prefix, ``replay_of`` (UTF-8), NUL, ``destinations`` (UTF-8), NUL,
    SHA-256 of ``value`` (of no bytes when the value is null). An absent header signs as ``""``."""
    digest = hashlib.sha256(value or b"").digest()
    return MESSAGE_PREFIX + replay_of.encode() + b"\x00" + destinations.encode() + b"\x00" + digest


def sign(key: bytes, replay_of: str, destinations: str, value: bytes | None) -> str:
    """The ``x-streamforge-replay-signature`` value: lower-case hex HMAC-SHA256 (64 characters).

    Raises ValueError for an empty key (an installation without a replay key cannot vouch for a replay)."""
    if not key:
        raise ValueError("the replay key is empty")
    return hmac.new(key, signed_message(replay_of, destinations, value), hashlib.sha256).hexdigest()


def verify(key: bytes, replay_of: str, destinations: str, value: bytes | None, signature: str | None) -> bool:
    """Whether ``signature`` is the console's for these header values and this value (constant-time
    comparison). False with no key or no signature."""
    if not key or not signature:
        return False
    return hmac.compare_digest(sign(key, replay_of, destinations, value), signature.strip().lower())


def hmac_pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC's inner and outer padded keys for SHA-256 (RFC 2104 section 2, block size 64 bytes): a key longer
    than the block is hashed first, then zero-padded and XORed with 0x36 / 0x5c. For computing the HMAC where
    only a hash function is available (Spark's ``sha2``)."""
    block = hashlib.sha256(key).digest() if len(key) > 64 else key
    block = block.ljust(64, b"\x00")
    return bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)
