"""Token shards: the tokenizer script, the header checks, the loader's determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from workloads.data import byte_tokenizer
from workloads.data.make_corpus import generate
from workloads.data.shards import (
    HEADER_BYTES,
    LoaderState,
    ShardError,
    ShardLoader,
    read_header,
    write_shard,
)
from workloads.training.config import DEFAULT_CORPUS


def test_tokenize_cli_writes_train_and_val_shards(tmp_path: Path) -> None:
    text = tmp_path / "a.txt"
    text.write_text("hello world, " * 1000, encoding="utf-8")
    assert (
        byte_tokenizer.main(
            [str(text), "--output-dir", str(tmp_path / "out"), "--shard-tokens", "5000"]
        )
        == 0
    )
    train = sorted((tmp_path / "out").glob("train_*.bin"))
    val = sorted((tmp_path / "out").glob("val_*.bin"))
    assert len(train) == 3 and len(val) == 1
    total = sum(read_header(p).num_tokens for p in train + val)
    assert total == len(("hello world, " * 1000).encode())
    tokens = np.fromfile(train[0], dtype="<u2", offset=HEADER_BYTES)
    assert byte_tokenizer.decode_bytes(tokens[:12].tolist()) == "hello world,"


def test_tokenize_cli_missing_input_is_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = byte_tokenizer.main([str(tmp_path / "missing.txt"), "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and "no such file" in err and "Traceback" not in err


def test_truncated_shard_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "train_000000.bin"
    write_shard(path, torch.arange(100), 256)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ShardError, match="truncated"):
        read_header(path)
    (tmp_path / "junk.bin").write_bytes(b"x" * 2000)
    with pytest.raises(ShardError, match="not a token shard"):
        read_header(tmp_path / "junk.bin")


def test_shard_of_a_larger_vocabulary_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "train_000000.bin"
    write_shard(path, torch.arange(1000), 50257)
    with pytest.raises(ShardError, match="vocabulary of 50257"):
        ShardLoader([path], batch=1, seq_len=8, rank=0, world_size=1, vocab_size=256)


def test_ranks_read_disjoint_slices_and_state_resumes_exactly(tmp_path: Path) -> None:
    path = tmp_path / "train_000000.bin"
    write_shard(path, torch.arange(1000), 1000)
    loaders = [
        ShardLoader([path], batch=2, seq_len=8, rank=r, world_size=2, vocab_size=1024)
        for r in range(2)
    ]
    x0, y0 = loaders[0].next_batch()
    x1, _ = loaders[1].next_batch()
    assert x0.shape == (2, 8) and x0.dtype.is_floating_point is False
    assert x0.flatten().tolist() == list(range(16))
    assert x1.flatten().tolist() == list(range(16, 32))
    assert torch_equal(y0, x0 + 1)
    saved = loaders[0].state
    expected = [loaders[0].next_batch()[0] for _ in range(100)]  # wraps around the shard
    resumed = ShardLoader([path], batch=2, seq_len=8, rank=0, world_size=2, vocab_size=1024)
    resumed.load_state(LoaderState(saved.shard, saved.position))
    assert all(torch_equal(resumed.next_batch()[0], e) for e in expected)


def torch_equal(a: object, b: object) -> bool:
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    return torch.equal(a, b)


def test_too_small_shard_says_what_to_change(tmp_path: Path) -> None:
    path = tmp_path / "train_000000.bin"
    write_shard(path, torch.arange(50), 256)
    with pytest.raises(ShardError, match="--micro-batch-size"):
        ShardLoader([path], batch=4, seq_len=16, rank=0, world_size=1, vocab_size=256)


def test_shipped_corpus_is_the_generator_output_and_small() -> None:
    text = DEFAULT_CORPUS.read_text(encoding="utf-8")
    assert text == generate()
    assert 100_000 < len(text.encode()) < 400_000


def test_ensure_shards_tokenises_once(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("abc " * 5000, encoding="utf-8")
    first = byte_tokenizer.ensure_shards(tmp_path / "data", corpus)
    corpus.write_text("changed", encoding="utf-8")
    assert byte_tokenizer.ensure_shards(tmp_path / "data", corpus) == first


def test_ids_above_32767_round_trip_through_the_layout_llm_c_reads(tmp_path: Path) -> None:
    """Shards are written and read with torch alone; numpy reads the same uint16s."""
    path = tmp_path / "train_000000.bin"
    ids = [0, 1, 255, 32767, 32768, 40000, 50256, 65535] * 3
    write_shard(path, torch.tensor(ids), 65536)
    assert np.fromfile(path, dtype="<u2", offset=HEADER_BYTES).tolist() == ids
    inputs, targets = ShardLoader(
        [path], batch=1, seq_len=len(ids) - 1, rank=0, world_size=1, vocab_size=65536
    ).next_batch()
    assert inputs.dtype == torch.int64
    assert inputs.flatten().tolist() == ids[:-1] and targets.flatten().tolist() == ids[1:]
