"""Version-dependent torch APIs: each fallback taken when the newer API is missing,
found by feature detection (the pinned torch has the newer ones)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from workloads.data.shards import LoaderState
from workloads.training import compat
from workloads.training.checkpoint import Checkpointer, complete_checkpoints


def test_fsdp2_is_found_in_the_public_module_first_then_the_composable_one() -> None:
    assert compat.fsdp_api().module == "torch.distributed.fsdp"
    # A torch without the public module (2.4/2.5) still has the composable one.
    older = compat.fsdp_api(
        ("torch.distributed.no_such_fsdp", "torch.distributed._composable.fsdp")
    )
    assert older.module == "torch.distributed._composable.fsdp"
    assert callable(older.fully_shard)
    with pytest.raises(ImportError, match="use --parallelism ddp"):
        compat.fsdp_api(("torch.distributed.no_such_fsdp",))


def test_no_dist_is_passed_only_where_dcp_accepts_it() -> None:
    def new_save(state: object, *, checkpoint_id: str, no_dist: bool = False) -> None: ...

    def old_save(state: object, *, checkpoint_id: str) -> None: ...

    def any_kwargs(state: object, **kwargs: Any) -> None: ...

    assert compat.dcp_kwargs(new_save, True) == {"no_dist": True}
    assert compat.dcp_kwargs(old_save, True) == {}
    assert compat.dcp_kwargs(any_kwargs, False) == {"no_dist": False}


def test_async_checkpoint_without_async_save_response_type(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("workloads.training.checkpoint.async_save_response_type", lambda: None)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    saver = Checkpointer(tmp_path, rank=0, device=torch.device("cpu"), group=None)
    saver.save(1, model, optimizer, LoaderState(0, 0))
    saver.wait()
    assert [step for step, _ in complete_checkpoints(tmp_path)] == [1]


def test_sdpa_kernel_falls_back_to_the_legacy_context(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[dict[str, bool]] = []

    @contextlib.contextmanager
    def legacy(**flags: bool) -> Iterator[None]:
        used.append(flags)
        yield

    real = compat._optional_module
    monkeypatch.setattr(
        compat,
        "_optional_module",
        lambda name: SimpleNamespace() if name == "torch.nn.attention" else real(name),
    )
    monkeypatch.setattr(torch.backends.cuda, "sdp_kernel", legacy)
    with compat.sdpa_kernel(["flash", "math"]):
        pass
    assert used == [{"enable_flash": True, "enable_mem_efficient": False, "enable_math": True}]


def test_sdpa_kernel_restricts_the_backends_on_this_torch() -> None:
    q = torch.randn(1, 2, 8, 4)
    with compat.sdpa_kernel(["math"]):
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert out.shape == q.shape


def test_compiler_reset_and_cudagraph_marks_without_the_public_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.delattr(torch.compiler, "reset")
    monkeypatch.delattr(torch.compiler, "cudagraph_mark_step_begin")
    monkeypatch.setattr(torch._dynamo, "reset", lambda: calls.append("dynamo"))
    compat.compiler_reset()
    compat.cudagraph_mark_step_begin()  # a no-op, not an error
    assert calls == ["dynamo"]
    assert any("absent" in line for line in compat.describe())


def test_autocast_dtype_on_this_torch_and_the_older_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert compat.autocast_dtype("cpu") is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compat.autocast_dtype("cpu") is torch.bfloat16

    def no_device_argument(*args: object) -> bool:
        if args:
            raise TypeError("is_autocast_enabled() takes 0 positional arguments")
        return False

    # torch.autocast itself uses the new signature: patch only inside the block.
    with torch.autocast("cpu", dtype=torch.bfloat16), monkeypatch.context() as patch:
        patch.setattr(torch, "is_autocast_enabled", no_device_argument)
        assert compat.autocast_dtype("cpu") is torch.bfloat16
        assert compat.autocast_dtype("cuda") is None
