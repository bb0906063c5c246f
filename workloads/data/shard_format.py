"""The token shard format, read with the standard library alone.

A shard is a 1024-byte header of 256 little-endian int32 (``[0]`` magic 20240520,
``[1]`` version 1, ``[2]`` token count, ``[3]`` vocabulary size or 0 when unknown)
followed by the tokens as uint16 (llm.c's layout; `workloads.data.shards` writes and
loads them with torch). The header reader is here, apart from torch, because the model
server's image reads the training data's statistics (`workloads.inference.drift`) and
has no torch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4


class ShardError(ValueError):
    """A shard file or shard directory that cannot be used, with what to do about it."""


@dataclass(frozen=True)
class ShardInfo:
    """What a shard's header says."""

    path: Path
    num_tokens: int
    vocab_size: int


def read_header(path: Path) -> ShardInfo:
    """Check a shard's header against its size; `ShardError` naming the problem."""
    try:
        raw = path.read_bytes()[:HEADER_BYTES]
    except OSError as err:
        raise ShardError(f"{path}: cannot read ({err.strerror})") from err
    if len(raw) < HEADER_BYTES:
        raise ShardError(f"{path}: shorter than the {HEADER_BYTES}-byte shard header")
    magic, version, num_tokens, vocab_size = struct.unpack_from("<4i", raw)
    if magic != MAGIC or version != VERSION:
        raise ShardError(
            f"{path}: not a token shard (magic {magic}, version {version}; "
            f"expected {MAGIC}, {VERSION}); make shards with `python -m workloads.data.tokenize`"
        )
    expected = HEADER_BYTES + 2 * num_tokens
    actual = path.stat().st_size
    if actual != expected:
        raise ShardError(
            f"{path}: header says {num_tokens} tokens ({expected} bytes) but the file has "
            f"{actual} bytes; it is truncated or corrupt, re-create it"
        )
    return ShardInfo(path, num_tokens, vocab_size)


def shard_files(data_dir: Path, split: str) -> list[Path]:
    """The ``{split}_*.bin`` shards of a directory, in name order."""
    return sorted(data_dir.glob(f"{split}_*.bin"))
