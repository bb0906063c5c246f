"""Tokenise text files into uint16 shards (``train_*.bin``, ``val_*.bin``), offline.

The tokenizer is byte-level UTF-8 (vocabulary 256): it needs no downloaded
vocabulary, so the package trains with no network. GPT-2-tokenised shards made
elsewhere (llm.c's layout) can be dropped into a data directory instead.

Usage::

    python -m workloads.data.byte_tokenizer --output-dir build/data/byte FILE [FILE ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from workloads.data.shard_format import (
    BYTE_VOCAB_SIZE,
    DEFAULT_SHARD_TOKENS,
    DEFAULT_VAL_FRACTION,
    data_dir_problem,
)
from workloads.data.shards import ShardError, shard_files, write_shard

__all__ = [
    "BYTE_VOCAB_SIZE",
    "DEFAULT_SHARD_TOKENS",
    "DEFAULT_VAL_FRACTION",
    "decode_bytes",
    "encode_bytes",
    "ensure_shards",
    "tokenize_files",
]


def encode_bytes(text: str) -> torch.Tensor:
    """Byte-level token ids of ``text`` (int64)."""
    data = text.encode("utf-8")
    if not data:
        return torch.zeros(0, dtype=torch.int64)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)


def decode_bytes(tokens: Sequence[int]) -> str:
    """Text of byte-level token ids (invalid UTF-8 sequences replaced)."""
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def tokenize_files(
    inputs: Sequence[Path],
    output_dir: Path,
    *,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    val_fraction: float = DEFAULT_VAL_FRACTION,
) -> tuple[list[Path], list[Path]]:
    """Write the train and validation shards of ``inputs``; return their paths.

    The last ``val_fraction`` of the token stream is the validation split.
    """
    if not inputs:
        raise ShardError("no input text files given")
    if shard_tokens < 2:
        raise ShardError(f"--shard-tokens must be at least 2, got {shard_tokens}")
    if not 0.0 <= val_fraction < 1.0:
        raise ShardError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    pieces = []
    for path in inputs:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as err:
            raise ShardError(f"{path}: no such file") from err
        except UnicodeDecodeError as err:
            raise ShardError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
        except OSError as err:
            raise ShardError(f"{path}: cannot read ({err.strerror})") from err
        pieces.append(encode_bytes(text))
    tokens = torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int64)
    if tokens.numel() < 2:
        raise ShardError("the input files hold no text to train on")
    split = tokens.numel() - int(tokens.numel() * val_fraction)
    written: dict[str, list[Path]] = {"train": [], "val": []}
    for name, part in (("train", tokens[:split]), ("val", tokens[split:])):
        for index, start in enumerate(range(0, part.numel(), shard_tokens)):
            path = output_dir / f"{name}_{index:06d}.bin"
            write_shard(path, part[start : start + shard_tokens], BYTE_VOCAB_SIZE)
            written[name].append(path)
    return written["train"], written["val"]


def ensure_shards(data_dir: Path, corpus: Path) -> list[Path]:
    """The train shards of ``data_dir``, tokenising ``corpus`` into it first when it
    is absent or empty (the trainer's default directory, a pod's scratch volume). A
    directory holding anything else but no shards is refused (`ShardError`), never
    written into. Safe when several ranks race: shard writes are atomic and identical."""
    problem = data_dir_problem(data_dir, fill_from=str(corpus))
    if problem is not None:
        raise ShardError(problem)
    existing = shard_files(data_dir, "train")
    if existing:
        return existing
    train, _ = tokenize_files([corpus], data_dir)
    return train


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.data.byte_tokenizer",
        description="Tokenise UTF-8 text files into byte-level uint16 token shards.",
    )
    parser.add_argument("inputs", nargs="+", type=Path, help="UTF-8 text files")
    parser.add_argument("--output-dir", type=Path, required=True, help="where shards go")
    parser.add_argument(
        "--shard-tokens",
        type=int,
        default=DEFAULT_SHARD_TOKENS,
        help="tokens per shard (default 50M)",
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=DEFAULT_VAL_FRACTION,
        help="share of tokens held out as val_*.bin (default 0.05)",
    )
    args = parser.parse_args(argv)
    try:
        train, val = tokenize_files(
            args.inputs,
            args.output_dir,
            shard_tokens=args.shard_tokens,
            val_fraction=args.val_fraction,
        )
    except ShardError as err:
        print(f"tokenize: {err}", file=sys.stderr)
        return 2
    print(f"wrote {len(train)} train and {len(val)} val shard(s) to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
