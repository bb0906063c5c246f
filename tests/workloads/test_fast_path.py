"""The fast path's switches on CPU: each changes what runs and keeps the results
equivalent (chunked loss, prefetching loader, DDP before compile, stop-flag checks
every N steps, compile modes), and the benchmark runs at the preset's shape."""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workloads.data.shards import LoaderState, ShardLoader, write_shard
from workloads.training import bench, compat, engine, train
from workloads.training.config import ModelConfig, override, preset
from workloads.training.distributed import Topology
from workloads.training.model import GPT, chunked_linear_cross_entropy

CPU = torch.device("cpu")
SMALL = ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=64, vocab_size=300)


def pair(loss_chunk: int) -> tuple[GPT, GPT]:
    torch.manual_seed(0)
    plain = GPT(SMALL)
    chunked = GPT(SMALL, loss_chunk=loss_chunk)
    chunked.load_state_dict(plain.state_dict())
    return plain, chunked


def test_chunked_loss_matches_the_plain_loss_and_gradients() -> None:
    plain, chunked = pair(loss_chunk=50)  # 120 rows: chunks of 50, 50 and 20
    idx = torch.randint(0, 300, (3, 40))
    targets = torch.randint(0, 300, (3, 40))
    plain_loss, chunked_loss = plain(idx, targets), chunked(idx, targets)
    assert "ChunkedLinearCrossEntropy" in type(chunked_loss.grad_fn).__name__
    assert "ChunkedLinearCrossEntropy" not in type(plain_loss.grad_fn).__name__
    plain_loss.backward()
    chunked_loss.backward()
    assert chunked_loss.item() == pytest.approx(plain_loss.item(), rel=1e-6)
    for (name, a), b in zip(plain.named_parameters(), chunked.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_chunked_loss_under_bf16_autocast_follows_the_plain_path() -> None:
    plain, chunked = pair(loss_chunk=64)
    idx, targets = torch.randint(0, 300, (2, 40)), torch.randint(0, 300, (2, 40))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, got = plain(idx, targets), chunked(idx, targets)
    assert got.dtype == torch.float32  # the loss is accumulated in fp32
    assert got.item() == pytest.approx(expected.item(), rel=1e-3)


def test_chunked_loss_never_holds_more_than_a_chunk_of_logits() -> None:
    hidden = torch.randn(100, 8, requires_grad=True)
    weight = torch.randn(1000, 8, requires_grad=True)
    targets = torch.randint(0, 1000, (100,))
    shapes: list[tuple[int, ...]] = []
    real_matmul = torch.Tensor.__matmul__

    def recording(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = real_matmul(a, b)
        shapes.append(tuple(out.shape))
        return out

    torch.Tensor.__matmul__ = recording  # type: ignore[method-assign,assignment]
    try:
        loss = chunked_linear_cross_entropy(hidden, weight, targets, chunk=25)
        loss.backward()  # type: ignore[no-untyped-call]
    finally:
        torch.Tensor.__matmul__ = real_matmul  # type: ignore[method-assign]
    assert (25, 1000) in shapes and (100, 1000) not in shapes


def test_resolve_turns_the_cuda_only_switches_off_on_cpu_unless_asked() -> None:
    auto = engine.resolve(preset("tiny"), CPU)
    assert auto.loss_chunk == 0 and not auto.prefetch
    asked = engine.resolve(override(preset("tiny"), {"chunked_loss": "on", "prefetch": "on"}), CPU)
    assert asked.loss_chunk == 4096 and asked.prefetch
    assert "chunked_loss" in asked.describe() and "prefetch" in asked.describe()
    assert engine.build_model(preset("tiny"), asked).loss_chunk == 4096


def shard_loader(tmp_path: Path) -> ShardLoader:
    path = tmp_path / "train_000000.bin"
    if not path.exists():
        write_shard(path, torch.arange(5000) % 256, 256)
    return ShardLoader([path], batch=2, seq_len=16, rank=0, world_size=1, vocab_size=256)


def test_prefetching_gives_identical_batches_in_identical_order(tmp_path: Path) -> None:
    base = engine.resolve(preset("tiny"), CPU)
    plain = engine.DeviceBatches(shard_loader(tmp_path), base)
    ahead = engine.DeviceBatches(shard_loader(tmp_path), dataclasses.replace(base, prefetch=True))
    for _ in range(400):  # wraps around the shard several times
        expected, got = plain.next(), ahead.next()
        assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])
        # The checkpointed position is that of the batch handed out, not the one
        # read ahead.
        assert ahead.state == plain.state
    # One batch is being read ahead in the background: once that read is done (waited
    # for here, so the check does not race the thread), the loader is past the batch
    # handed out.
    assert ahead._pending is not None
    ahead._pending.result()
    assert ahead.loader.state != ahead.state
    ahead.close()


def test_prefetching_loader_resumes_from_a_saved_state(tmp_path: Path) -> None:
    resolved = dataclasses.replace(engine.resolve(preset("tiny"), CPU), prefetch=True)
    first = engine.DeviceBatches(shard_loader(tmp_path), resolved)
    for _ in range(7):
        first.next()
    saved = first.state
    expected = [first.next()[0] for _ in range(5)]
    resumed = engine.DeviceBatches(shard_loader(tmp_path), resolved)
    resumed.next()  # a batch prefetched before the state is loaded is dropped
    resumed.load_state(LoaderState(saved.shard, saved.position))
    assert all(torch.equal(resumed.next()[0], e) for e in expected)
    first.close()
    resumed.close()


def test_stop_flag_is_all_reduced_only_every_n_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def all_reduce(tensor: torch.Tensor, **kwargs: Any) -> None:
        calls.append(int(tensor.item()))

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    previous = signal.getsignal(signal.SIGINT)
    stop = train.StopRequest(check_every=5)
    try:
        assert signal.getsignal(signal.SIGINT) == stop._handle  # Ctrl-C stops as SIGTERM does
        group: Any = object()  # any group: the collective is faked
        agreed = [stop.agreed(group, step) for step in range(1, 8)]
        assert agreed == [False] * 7 and calls == [0]  # only after step 5
        stop.requested = True  # SIGTERM arrives during step 8
        stops = [step for step in range(8, 21) if stop.agreed(group, step)]
        assert stops[0] == 10  # at most N - 1 = 4 steps later
        # A world of one has no collective to save: it stops after the same step.
        assert stop.agreed(None, 11)
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGINT) == previous


def test_compile_mode_reaches_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[type, dict[str, Any]]] = []
    monkeypatch.setattr(
        nn.Module, "compile", lambda self, **kw: seen.append((type(self), kw)), raising=True
    )
    for mode in ("default", "max-autotune"):
        config = override(preset("tiny"), {"compile": "on", "compile_mode": mode})
        resolved = engine.resolve(config, CPU)
        engine.parallelize(engine.build_model(config, resolved), resolved, Topology())
    assert seen == [(GPT, {}), (GPT, {"mode": "max-autotune"})]


def test_cuda_graph_modes_mark_each_micro_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marks: list[float] = []
    monkeypatch.setattr(compat, "cudagraph_mark_step_begin", lambda: marks.append(time.time()))
    for mode, expected in (("default", 0), ("reduce-overhead", 3)):
        config = override(
            preset("tiny"),
            {"compile": "on", "compile_mode": mode, "grad_accum_steps": "3", "steps": "1"},
        )
        resolved = engine.resolve(config, CPU)
        model = engine.build_model(config, resolved)  # not compiled: only the marks count
        marks.clear()
        engine.train_step(
            model=model,
            optimizer=engine.build_optimizer(model, config, resolved),
            batches=engine.DeviceBatches(shard_loader(tmp_path), resolved),
            config=config,
            resolved=resolved,
            step=1,
        )
        assert len(marks) == expected, mode


@pytest.fixture
def world_of_one() -> Any:
    """A real one-rank gloo group in this process (DDP needs a group)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_is_wrapped_before_compile_unless_switched_back(
    monkeypatch: pytest.MonkeyPatch, world_of_one: None
) -> None:
    compiled: list[type] = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: compiled.append(type(self)))
    topology = Topology(world_size=2, local_world_size=2)  # "distributed": DDP wraps
    for after_wrap, expected in (("on", DistributedDataParallel), ("off", GPT)):
        config = override(preset("tiny"), {"compile": "on", "compile_after_wrap": after_wrap})
        resolved = engine.resolve(config, CPU)
        wrapped = engine.parallelize(engine.build_model(config, resolved), resolved, topology)
        assert isinstance(wrapped, DistributedDataParallel)
        assert compiled[-1] is expected


@pytest.mark.slow
def test_both_compile_orders_train_the_same_model(world_of_one: None, tmp_path: Path) -> None:
    topology = Topology(world_size=2, local_world_size=2)
    losses = {}
    for after_wrap in ("on", "off"):
        config = override(
            preset("tiny"),
            {"compile": "on", "compile_after_wrap": after_wrap, "n_layer": "1", "steps": "2"},
        )
        resolved = engine.resolve(config, CPU)
        compat.compiler_reset()
        model = engine.parallelize(engine.build_model(config, resolved), resolved, topology)
        optimizer = engine.build_optimizer(model, config, resolved)
        batches = engine.DeviceBatches(shard_loader(tmp_path), resolved)
        losses[after_wrap] = [
            engine.train_step(
                model=model,
                optimizer=optimizer,
                batches=batches,
                config=config,
                resolved=resolved,
                step=step,
            ).loss.item()
            for step in (1, 2)
        ]
    assert losses["on"] == pytest.approx(losses["off"], rel=1e-5)


def test_bench_runs_at_the_presets_shape_and_ablates_every_switch() -> None:
    fast = bench.fast_overrides(torch.device("cuda"), bf16=True)
    names = [name for name, _ in bench.variants(fast, ablate=True, cuda=True)]
    for switch in ("chunked_loss", "prefetch", "compile", "dtype", "sdpa"):
        assert f"fast-{switch}" in names
    assert names[-2:] == ["fast+reduce-overhead", "fast+max-autotune"]
    cpu_names = [n for n, _ in bench.variants(bench.fast_overrides(CPU, bf16=False), True, False)]
    assert "fast-chunked_loss" not in cpu_names and "fast+max-autotune" not in cpu_names
    assert bench.Shape(32, 16).halved() == bench.Shape(16, 32)
    assert bench.Shape(1, 4).halved() is None


def fake_result(config: Any, variant: str) -> bench.Result:
    return bench.Result(
        config.preset,
        variant,
        "x",
        124.0,
        config.tokens_per_micro_step * config.grad_accum_steps,
        1.0,
        1.0,
        1.0,
        None,
        0.0,
        1.0,
        shape=str(bench.Shape(config.micro_batch_size, config.grad_accum_steps)),
    )


def test_bench_measures_again_at_half_the_micro_batch_when_out_of_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run_variant(config: Any, variant: str, device: Any, warmup: int, steps: int) -> Any:
        if variant == "baseline" and config.micro_batch_size > 8:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6 GiB")
        return fake_result(config, variant)

    monkeypatch.setattr(bench, "run_variant", run_variant)
    measured = bench.measure_preset(
        preset("gpt2-124m"),
        bench.variants(bench.fast_overrides(torch.device("cuda"), bf16=True), False, True),
        device=torch.device("cuda"),
        shape=bench.Shape(32, 16),
        warmup=1,
        steps=3,
        report=lambda line: None,
    )
    shapes = {r.variant: (r.shape, r.tokens_per_step) for r in measured.results}
    # Same tokens per optimizer step, at the largest micro-batch that fits.
    assert shapes == {"baseline": ("8x64", 524288), "fast": ("32x16", 524288)}


def test_bench_leaves_out_what_the_time_budget_cannot_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run_variant(config: Any, variant: str, device: Any, warmup: int, steps: int) -> Any:
        time.sleep(0.2)
        return fake_result(config, variant)

    monkeypatch.setattr(bench, "run_variant", run_variant)
    measured = bench.measure_preset(
        preset("tiny"),
        bench.variants(bench.fast_overrides(CPU, bf16=False), True, False),
        device=CPU,
        shape=bench.Shape(16, 1),
        warmup=1,
        steps=3,
        deadline=time.monotonic() + 0.3,
        report=lambda line: None,
    )
    assert [r.variant for r in measured.results] == ["baseline"]
    assert measured.skipped and all("time budget" in s for s in measured.skipped)


def test_gradients_under_cuda_graphs_live_outside_the_graphs() -> None:
    """CUDA graphs overwrite their outputs at the next replay: with gradient accumulation
    each ``.grad`` must be a tensor of its own that later micro-steps add into in place
    (the H100 run failed without this), and zeroing keeps it allocated."""
    from workloads.training.engine import preallocate_grads  # noqa: PLC0415

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x1, x2 = torch.randn(2, 4), torch.randn(2, 4)
    expected = []
    for x in (x1, x2):
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
        expected.append(model.weight.grad.clone())
    model.zero_grad(set_to_none=True)
    preallocate_grads(model)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    storage = {name: p.grad.data_ptr() for name, p in model.named_parameters()}
    model(x1).sum().backward()
    model(x2).sum().backward()
    assert {n: p.grad.data_ptr() for n, p in model.named_parameters()} == storage
    assert torch.allclose(model.weight.grad, expected[0] + expected[1])
