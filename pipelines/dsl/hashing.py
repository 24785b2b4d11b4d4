"""Digests for ``HASH:`` transforms and ``HASH:`` keys, byte-for-byte as StreamForge prints them.

StreamForge (``src/hash.rs``) hashes with ``md-5``/``sha2`` (lowercase hex) and, for MURMUR, the
``murmur3`` crate 0.5's ``murmur3_x64_128`` with seed 0, which returns the 128-bit value
``(h2 << 64) | h1``. It prints:

- ``MURMUR128``: ``format!("{:032x}", that u128)``, i.e. ``h2`` as 16 hex digits then ``h1`` as
  16 hex digits. Note: this is *not* the usual little-endian byte dump of MurmurHash3
  (``h1`` bytes then ``h2`` bytes, as ``mmh3.hash_bytes`` gives).
- ``MURMUR64``: ``format!("{:016x}", hash as u64)``, i.e. the low half ``h1`` as 16 hex digits.

MurmurHash3 x64_128 is implemented here from Austin Appleby's public algorithm description.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["hex_digest", "murmur3_x64_128"]

_MASK64: Final = (1 << 64) - 1
_C1: Final = 0x87C37B91114253D5
_C2: Final = 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK64
    k ^= k >> 33
    return k


def murmur3_x64_128(data: bytes, seed: int = 0) -> tuple[int, int]:
    """MurmurHash3 x64 128-bit of ``data``; returns ``(h1, h2)`` as unsigned 64-bit ints."""
    h1 = h2 = seed & 0xFFFFFFFF
    length = len(data)
    full = length - length % 16
    for offset in range(0, full, 16):
        k1 = int.from_bytes(data[offset : offset + 8], "little")
        k2 = int.from_bytes(data[offset + 8 : offset + 16], "little")
        h1 ^= (_rotl((k1 * _C1) & _MASK64, 31) * _C2) & _MASK64
        h1 = (((_rotl(h1, 27) + h2) & _MASK64) * 5 + 0x52DCE729) & _MASK64
        h2 ^= (_rotl((k2 * _C2) & _MASK64, 33) * _C1) & _MASK64
        h2 = (((_rotl(h2, 31) + h1) & _MASK64) * 5 + 0x38495AB5) & _MASK64
    tail = data[full:]
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= (_rotl((k2 * _C2) & _MASK64, 33) * _C1) & _MASK64
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        h1 ^= (_rotl((k1 * _C1) & _MASK64, 31) * _C2) & _MASK64
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    return h1, h2


def hex_digest(algorithm: str, data: bytes) -> str:
    """Lowercase hex digest of ``data`` as StreamForge prints it.

    ``algorithm`` is one of ``MD5`` (32 hex digits), ``SHA256`` (64), ``SHA512`` (128),
    ``MURMUR64`` (16), ``MURMUR128`` (32); see the module docstring for the MURMUR layouts.
    Raises ``ValueError`` for any other name.
    """
    if algorithm == "MD5":
        return hashlib.md5(data, usedforsecurity=False).hexdigest()
    if algorithm == "SHA256":
        return hashlib.sha256(data).hexdigest()
    if algorithm == "SHA512":
        return hashlib.sha512(data).hexdigest()
    if algorithm == "MURMUR64":
        h1, _ = murmur3_x64_128(data)
        return f"{h1:016x}"
    if algorithm == "MURMUR128":
        h1, h2 = murmur3_x64_128(data)
        return f"{h2:016x}{h1:016x}"
    raise ValueError(f"unknown hash algorithm {algorithm!r}")
