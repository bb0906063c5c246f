"""The PyTorch APIs whose location or signature changed between releases, found by
feature detection (never by parsing ``torch.__version__``).

The package pins torch 2.13 for its own tests; a GPU machine may have any
preinstalled release from 2.11 on. Each function here picks the API that exists and
falls back to the older spelling, so the workloads run unchanged on both:

- FSDP2: ``torch.distributed.fsdp.fully_shard`` (public since 2.6), else
  ``torch.distributed._composable.fsdp``;
- DCP: ``no_dist`` is passed only to ``save``/``load``/``async_save`` that accept it,
  and ``AsyncSaveResponse`` (async saves with a stager return two futures) is
  optional;
- ``torch.nn.attention.sdpa_kernel``, else the deprecated
  ``torch.backends.cuda.sdp_kernel``;
- ``torch.compiler.reset`` / ``cudagraph_mark_step_begin``, else their
  ``torch._dynamo`` / no-op equivalents;
- the autocast state per device type (``torch.is_autocast_enabled(device_type)``,
  2.4+), else the per-device functions it replaced.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch


@dataclass(frozen=True)
class FsdpApi:
    """FSDP2's entry points, from wherever this torch keeps them."""

    fully_shard: Callable[..., Any]
    fsdp_module: type
    mixed_precision_policy: type
    module: str


FSDP_MODULES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def fsdp_api(candidates: Sequence[str] = FSDP_MODULES) -> FsdpApi:
    """The first of ``candidates`` that provides ``fully_shard``, ``FSDPModule`` and
    ``MixedPrecisionPolicy``; `ImportError` naming them all otherwise."""
    for name in candidates:
        try:
            module: ModuleType = importlib.import_module(name)
        except ImportError:
            continue
        names = ("fully_shard", "FSDPModule", "MixedPrecisionPolicy")
        if all(hasattr(module, attr) for attr in names):
            return FsdpApi(module.fully_shard, module.FSDPModule, module.MixedPrecisionPolicy, name)
    raise ImportError(
        f"no FSDP2 (fully_shard) in this torch {torch.__version__}: looked in "
        f"{', '.join(candidates)}; use --parallelism ddp or torch >= 2.6"
    )


def accepts(function: Callable[..., Any], parameter: str) -> bool:
    """Whether ``function`` takes a keyword argument named ``parameter``."""
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return parameter in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )


def dcp_kwargs(function: Callable[..., Any], no_dist: bool) -> dict[str, Any]:
    """``{"no_dist": no_dist}`` where ``function`` (a DCP save/load) takes it. Without
    the keyword, DCP decides from whether a process group is initialised, which is
    what ``no_dist`` says anyway."""
    return {"no_dist": no_dist} if accepts(function, "no_dist") else {}


def async_save_response_type() -> type | None:
    """DCP's ``AsyncSaveResponse`` where this torch has it."""
    module = importlib.import_module("torch.distributed.checkpoint.state_dict_saver")
    found = getattr(module, "AsyncSaveResponse", None)
    return found if isinstance(found, type) else None


def sdpa_kernel(backends: Sequence[str]) -> contextlib.AbstractContextManager[None]:
    """Restrict ``scaled_dot_product_attention`` to the named backends (``flash``,
    ``efficient``, ``cudnn``, ``math``)."""
    attention = _optional_module("torch.nn.attention")
    if attention is not None and hasattr(attention, "sdpa_kernel"):
        names = {
            "flash": "FLASH_ATTENTION",
            "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION",
            "math": "MATH",
        }
        chosen = [getattr(attention.SDPBackend, names[b]) for b in backends]
        manager: contextlib.AbstractContextManager[None] = attention.sdpa_kernel(chosen)
        return manager
    legacy: contextlib.AbstractContextManager[None] = torch.backends.cuda.sdp_kernel(
        enable_flash="flash" in backends,
        enable_mem_efficient="efficient" in backends,
        enable_math="math" in backends,
    )
    return legacy


def _optional_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def compiler_reset() -> None:
    """Forget every compiled graph (between benchmark variants, so each compiles
    afresh and none counts against the recompilation limit of another)."""
    reset = getattr(torch.compiler, "reset", None)
    if callable(reset):
        reset()
        return
    importlib.import_module("torch._dynamo").reset()


def cudagraph_mark_step_begin() -> None:
    """Tell CUDA-graph trees a new iteration begins (their outputs of the previous
    one may be overwritten); a no-op on a torch without them."""
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
    if callable(mark):
        mark()


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype in force for ``device_type``, ``None`` when autocast is off."""
    try:
        enabled = bool(torch.is_autocast_enabled(device_type))
        getter: Callable[[str], torch.dtype] | None = getattr(torch, "get_autocast_dtype", None)
        if enabled and getter is not None:
            return getter(device_type)
        if not enabled:
            return None
    except TypeError:
        pass  # older signature: no device argument
    if device_type == "cuda":
        if torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
        return None
    if torch.is_autocast_cpu_enabled():
        return torch.get_autocast_cpu_dtype()
    return None


@contextlib.contextmanager
def no_autocast(device_type: str) -> Iterator[None]:
    """Autocast off for ``device_type`` (explicit dtypes inside)."""
    with torch.autocast(device_type=device_type, enabled=False):
        yield


def describe() -> list[str]:
    """Which of the version-dependent paths this torch takes (for logs)."""
    lines = []
    try:
        lines.append(f"FSDP2 from {fsdp_api().module}")
    except ImportError as err:
        lines.append(str(err))
    attention = _optional_module("torch.nn.attention")
    modern = attention is not None and hasattr(attention, "sdpa_kernel")
    lines.append(
        "sdpa_kernel from "
        + ("torch.nn.attention" if modern else "torch.backends.cuda.sdp_kernel (legacy)")
    )
    saver = importlib.import_module("torch.distributed.checkpoint.state_dict_saver")
    lines.append(
        f"DCP: no_dist {'passed' if accepts(saver.save, 'no_dist') else 'not accepted'}, "
        f"AsyncSaveResponse {'present' if async_save_response_type() else 'absent'}"
    )
    lines.append(
        "torch.compiler.reset "
        + ("present" if callable(getattr(torch.compiler, "reset", None)) else "absent (dynamo)")
        + ", cudagraph_mark_step_begin "
        + (
            "present"
            if callable(getattr(torch.compiler, "cudagraph_mark_step_begin", None))
            else "absent"
        )
    )
    return lines
