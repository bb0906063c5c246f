"""Pre-tokenised uint16 token shards and the memory-mapped loader that reads them.

A shard is a 1024-byte header of 256 little-endian int32 (``[0]`` magic 20240520,
``[1]`` version 1, ``[2]`` token count, ``[3]`` vocabulary size or 0 when unknown)
followed by the tokens as uint16. This is llm.c's layout, so GPT-2-tokenised shards
made by its scripts can be used with the GPT-2 presets unchanged.

The loader hands each rank a disjoint contiguous slice of the token stream, walks
the shards in name order and wraps around. Its whole state is ``(shard, position)``,
saved in every checkpoint, so a resumed run reads exactly the batches the
interrupted run would have read.

Only torch and the standard library are used (no numpy), so training runs on a
machine that has nothing but a preinstalled PyTorch (`workloads.training.gpu_check`).
The header and its reader are in `workloads.data.shard_format` (no torch), re-exported
here.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from workloads.data.shard_format import (
    HEADER_BYTES,
    HEADER_INTS,
    MAGIC,
    VERSION,
    ShardError,
    ShardInfo,
    check_train_shards,
    pack_header,
    read_header,
    shard_files,
)

__all__ = [
    "HEADER_BYTES",
    "HEADER_INTS",
    "MAGIC",
    "VERSION",
    "LoaderState",
    "ShardError",
    "ShardInfo",
    "ShardLoader",
    "read_header",
    "shard_files",
    "write_shard",
]


def _require_little_endian() -> None:
    # Shards are little-endian and tensors are read from / written as raw memory.
    if sys.byteorder != "little":
        raise ShardError("token shards can only be read and written on a little-endian host")


def write_shard(path: Path, tokens: torch.Tensor | Sequence[int], vocab_size: int) -> None:
    """Write ``tokens`` (integer ids) as a shard, atomically (a reader never sees half a
    file)."""
    _require_little_endian()
    values = torch.as_tensor(tokens).reshape(-1).to(torch.int64)
    count = values.numel()
    if count and (int(values.min()) < 0 or int(values.max()) >= min(vocab_size, 65536)):
        raise ShardError(f"{path}: token ids must lie in [0, {vocab_size})")
    header = pack_header(count, vocab_size)
    # int16 holds the same 16 bits as the uint16 ids (ids >= 32768 wrap to negative).
    raw = values.to(torch.int32).to(torch.int16).contiguous()
    payload = ctypes.string_at(raw.data_ptr(), 2 * count) if count else b""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{torch.randint(1 << 30, ()).item()}.tmp")
    with tmp.open("wb") as handle:
        handle.write(header)
        handle.write(payload)
    tmp.replace(path)


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
        self.batch, self.seq_len = batch, seq_len
        self.rank, self.world_size = rank, world_size
        self.infos = check_train_shards(
            files, ranks=world_size, batch=batch, seq_len=seq_len, vocab_size=vocab_size
        )
        self._maps: dict[int, torch.Tensor] = {}
        self.state = LoaderState(0, 0)

    def _tokens(self, shard: int) -> torch.Tensor:
        """The shard's tokens: a uint16 tensor over a read-only memory map."""
        if shard not in self._maps:
            _require_little_endian()
            info = self.infos[shard]
            with info.path.open("rb") as handle:
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            with warnings.catch_warnings():
                # The map is read-only and the tensor is only ever read.
                warnings.filterwarnings("ignore", message=".*not writable.*")
                self._maps[shard] = torch.frombuffer(
                    mapped, dtype=torch.uint16, count=info.num_tokens, offset=HEADER_BYTES
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
        chunk = self._tokens(shard)[start : start + span + 1].to(torch.int64)
        inputs = chunk[:-1].view(self.batch, self.seq_len)
        targets = chunk[1:].view(self.batch, self.seq_len)
        self.state = LoaderState(shard, position + self.world_size * span)
        return inputs, targets
