"""Pre-tokenised uint16 token shards and the memory-mapped loader that reads them.

A shard is a 1024-byte header of 256 little-endian int32 (``[0]`` magic 20240520,
``[1]`` version 1, ``[2]`` token count, ``[3]`` vocabulary size or 0 when unknown)
followed by the tokens as uint16. This is llm.c's layout, so GPT-2-tokenised shards
made by its scripts can be used with the GPT-2 presets unchanged.

The loader hands each rank a disjoint contiguous slice of the token stream, walks
the shards in name order and wraps around. Its whole state is ``(shard, position)``,
saved in every checkpoint, so a resumed run reads exactly the batches the
interrupted run would have read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.uint16


class ShardError(ValueError):
    """A shard file or shard directory that cannot be used, with what to do about it."""


def write_shard(path: Path, tokens: npt.NDArray[np.integer], vocab_size: int) -> None:
    """Write ``tokens`` as a shard, atomically (a reader never sees half a file)."""
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= min(vocab_size, 65536)):
        raise ShardError(f"{path}: token ids must lie in [0, {vocab_size})")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2], header[3] = MAGIC, VERSION, tokens.size, vocab_size
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{np.random.default_rng().integers(1 << 30)}.tmp")
    with tmp.open("wb") as handle:
        handle.write(header.tobytes())
        handle.write(tokens.astype("<u2").tobytes())
    tmp.replace(path)


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
    header = np.frombuffer(raw, dtype="<i4")
    if int(header[0]) != MAGIC or int(header[1]) != VERSION:
        raise ShardError(
            f"{path}: not a token shard (magic {int(header[0])}, version {int(header[1])}; "
            f"expected {MAGIC}, {VERSION}); make shards with `python -m workloads.data.tokenize`"
        )
    num_tokens = int(header[2])
    expected = HEADER_BYTES + 2 * num_tokens
    actual = path.stat().st_size
    if actual != expected:
        raise ShardError(
            f"{path}: header says {num_tokens} tokens ({expected} bytes) but the file has "
            f"{actual} bytes; it is truncated or corrupt, re-create it"
        )
    return ShardInfo(path, num_tokens, int(header[3]))


def shard_files(data_dir: Path, split: str) -> list[Path]:
    """The ``{split}_*.bin`` shards of a directory, in name order."""
    return sorted(data_dir.glob(f"{split}_*.bin"))


@dataclass(frozen=True)
class LoaderState:
    """Where the loader is: the shard index and the token offset of this step's
    first slice (rank 0's) in it."""

    shard: int
    position: int


class ShardLoader:
    """Contiguous ``(batch, seq_len)`` input/target batches for one rank.

    Args:
        files: the shards to read, in order.
        batch: sequences per batch.
        seq_len: tokens per sequence.
        rank: this process's data-parallel rank.
        world_size: data-parallel ranks; each takes its own slice of every step.
        vocab_size: the model's vocabulary; shards declaring a larger one are refused.
    """

    def __init__(
        self,
        files: list[Path],
        *,
        batch: int,
        seq_len: int,
        rank: int,
        world_size: int,
        vocab_size: int,
    ) -> None:
        if not files:
            raise ShardError("no shards given")
        self.batch, self.seq_len = batch, seq_len
        self.rank, self.world_size = rank, world_size
        self.infos = [read_header(path) for path in files]
        need = world_size * batch * seq_len + 1
        for info in self.infos:
            if info.vocab_size > vocab_size:
                raise ShardError(
                    f"{info.path}: tokenised for a vocabulary of {info.vocab_size} but the "
                    f"model has {vocab_size}; use a preset that matches the tokenizer"
                )
            if info.num_tokens < need:
                raise ShardError(
                    f"{info.path}: {info.num_tokens} tokens, fewer than one step needs "
                    f"({need} = {world_size} ranks x {batch} x {seq_len} + 1); lower "
                    f"--micro-batch-size / --seq-len or use a larger corpus"
                )
        self._maps: dict[int, np.memmap[tuple[int], np.dtype[np.uint16]]] = {}
        self.state = LoaderState(0, 0)

    def _tokens(self, shard: int) -> np.memmap[tuple[int], np.dtype[np.uint16]]:
        if shard not in self._maps:
            info = self.infos[shard]
            self._maps[shard] = np.memmap(
                info.path,
                dtype=TOKEN_DTYPE,
                mode="r",
                offset=HEADER_BYTES,
                shape=(info.num_tokens,),
            )
        return self._maps[shard]

    def load_state(self, state: LoaderState) -> None:
        """Continue from a saved position (shard indices wrap if shards were removed)."""
        self.state = LoaderState(state.shard % len(self.infos), state.position)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next ``(inputs, targets)`` int64 CPU tensors and advance the position."""
        span = self.batch * self.seq_len
        shard, position = self.state.shard, self.state.position
        if position + self.world_size * span + 1 > self.infos[shard].num_tokens:
            shard, position = (shard + 1) % len(self.infos), 0
        start = position + self.rank * span
        window = np.asarray(self._tokens(shard)[start : start + span + 1], dtype=np.int64)
        chunk = torch.from_numpy(window)
        inputs = chunk[:-1].view(self.batch, self.seq_len)
        targets = chunk[1:].view(self.batch, self.seq_len)
        self.state = LoaderState(shard, position + self.world_size * span)
        return inputs, targets
