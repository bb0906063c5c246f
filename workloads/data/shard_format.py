"""The token shard's on-disk layout, with the standard library only.

A shard is a 1024-byte header of 256 little-endian int32 (``[0]`` magic 20240520,
``[1]`` version 1, ``[2]`` token count, ``[3]`` vocabulary size or 0 when unknown)
followed by the tokens as little-endian uint16: llm.c's layout. The trainer's loader
(`workloads.data.shards`, which needs torch) and the Spark preprocessing job (which does
not have torch) both write and read it through this module, so there is one definition.

The byte-level tokenizer (vocabulary 256: a token is one UTF-8 byte) is defined here
too: `workloads.data.byte_tokenizer` and the Spark job produce the same tokens for the same
text. The model server's image reads the training data's statistics through it
(`workloads.inference.drift`) and has no torch either.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
#: The byte-level tokenizer's vocabulary: one token per byte value.
BYTE_VOCAB_SIZE = 256
#: Tokens per shard and the held-out share, for `workloads.data.byte_tokenizer` and the Spark job.
DEFAULT_SHARD_TOKENS = 50_000_000
DEFAULT_VAL_FRACTION = 0.05
#: Shard file names the trainer reads: ``train_000000.bin``, ``val_000000.bin``.
SHARD_SPLITS = ("train", "val")


def pack_header(num_tokens: int, vocab_size: int) -> bytes:
    """The 1024-byte header of a shard of ``num_tokens`` tokens."""
    return struct.pack(f"<{HEADER_INTS}i", MAGIC, VERSION, num_tokens, vocab_size, *[0] * 252)


@dataclass(frozen=True)
class Header:
    """What a shard's first 16 bytes say."""

    magic: int
    version: int
    num_tokens: int
    vocab_size: int

    @property
    def is_shard(self) -> bool:
        return self.magic == MAGIC and self.version == VERSION

    @property
    def expected_size(self) -> int:
        """The file size this header promises."""
        return HEADER_BYTES + 2 * self.num_tokens


def unpack_header(raw: bytes) -> Header | None:
    """The header of a shard's first bytes; ``None`` when they are too short."""
    if len(raw) < HEADER_BYTES:
        return None
    return Header(*struct.unpack_from("<4i", raw))


def read_header_bytes(path: Path) -> bytes:
    """The first `HEADER_BYTES` of a file (fewer when it is shorter)."""
    with path.open("rb") as handle:
        return handle.read(HEADER_BYTES)


def shard_name(split: str, index: int) -> str:
    """``train_000003.bin``: the name the trainer's loader globs for."""
    return f"{split}_{index:06d}.bin"


def is_shard_name(name: str) -> bool:
    """Whether the trainer would read a file of this name as a shard."""
    return any(name.startswith(f"{split}_") and name.endswith(".bin") for split in SHARD_SPLITS)


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
        header = unpack_header(read_header_bytes(path))
    except OSError as err:
        raise ShardError(f"{path}: cannot read ({err.strerror})") from err
    if header is None:
        raise ShardError(f"{path}: shorter than the {HEADER_BYTES}-byte shard header")
    if not header.is_shard:
        raise ShardError(
            f"{path}: not a token shard (magic {header.magic}, version {header.version}; "
            f"expected {MAGIC}, {VERSION}); make shards with "
            "`python -m workloads.data.byte_tokenizer`"
        )
    actual = path.stat().st_size
    if actual != header.expected_size:
        raise ShardError(
            f"{path}: header says {header.num_tokens} tokens ({header.expected_size} bytes) but "
            f"the file has {actual} bytes; it is truncated or corrupt, re-create it"
        )
    return ShardInfo(path, header.num_tokens, header.vocab_size)


def shard_files(data_dir: Path, split: str) -> list[Path]:
    """The ``{split}_*.bin`` shards of a directory, in name order."""
    return sorted(data_dir.glob(f"{split}_*.bin"))


def data_dir_problem(data_dir: Path, *, fill_from: str = "") -> str | None:
    """Why ``data_dir`` cannot be trained on, or None.

    Args:
        data_dir: where the ``train_*.bin`` shards should be.
        fill_from: the text file the trainer may tokenise into ``data_dir`` when the
            directory is absent or empty ("": it may not write there). A directory that
            holds anything else is never written into: it is someone's folder, not ours.
    """
    if data_dir.exists() and not data_dir.is_dir():
        return f"the data directory {data_dir} is not a directory; point --data-dir at one"
    if data_dir.is_dir() and shard_files(data_dir, "train"):
        return None
    # Another rank filling the directory at the same moment (nodes that share it) has
    # left only its shard writer's temporary files in it so far: that is still empty.
    empty = not data_dir.exists() or all(
        p.name.startswith(".") and p.name.endswith(".tmp") for p in data_dir.iterdir()
    )
    if fill_from and empty:
        return None
    if not empty:
        return (
            f"the data directory {data_dir} holds no token shards (train_*.bin); if it holds "
            f"text, make a dataset of it (`make data SOURCE={data_dir} OUT=<new dir>`) and "
            "train on that"
        )
    state = "does not exist" if not data_dir.exists() else "is empty"
    return (
        f"the data directory {data_dir} {state}; make a dataset there (`make data "
        f"SOURCE=<text dir> OUT={data_dir}`) or tokenise text into it (`python -m "
        f"workloads.data.byte_tokenizer --output-dir {data_dir} FILE ...`)"
    )


def check_train_shards(
    files: list[Path], *, ranks: int, batch: int, seq_len: int, vocab_size: int
) -> list[ShardInfo]:
    """The headers of ``files``, each checked against its size, the model's vocabulary
    and the tokens one step of every rank reads (`ShardError` naming the first shard
    that fails). The loader (`workloads.data.shards.ShardLoader`) and the launcher of
    `make train`, before any worker starts, check with it.

    Args:
        files: the train shards, in the order the loader reads them.
        ranks: data-parallel ranks; each takes its own slice of every step.
        batch: sequences per rank per micro-step.
        seq_len: tokens per sequence.
        vocab_size: the model's (padded) vocabulary; a shard declaring a larger one is
            refused.
    """
    if not files:
        raise ShardError("no shards given")
    infos = [read_header(path) for path in files]
    need = ranks * batch * seq_len + 1
    for info in infos:
        if info.vocab_size > vocab_size:
            raise ShardError(
                f"{info.path}: tokenised for a vocabulary of {info.vocab_size} but the "
                f"model has {vocab_size}; use a preset that matches the tokenizer"
            )
        if info.num_tokens < need:
            raise ShardError(
                f"{info.path}: {info.num_tokens} tokens, fewer than one step needs "
                f"({need} = {ranks} ranks x {batch} x {seq_len} + 1); lower "
                f"--micro-batch-size / --seq-len or use a larger corpus"
            )
    return infos
