"""Tensor parallelism on a 2-D device mesh (``--tp N``), as torchtitan lays it out.

The ranks form a ``("dp", "tp")`` `DeviceMesh`: ``tp`` consecutive ranks (one node's
GPUs, joined by NVLink) split every block, and FSDP2 (``fully_shard``) shards over the
``dp`` ranks that remain (across nodes). Within a block (Megatron-LM's split, through
`torch.distributed.tensor.parallel`):

- attention: ``c_attn`` column-wise (each rank computes whole heads: their q, k and v),
  ``c_proj`` row-wise; the MLP: ``c_fc`` column-wise, ``c_proj`` row-wise. Each half
  then needs one all-gather in and one reduce-scatter out.
- sequence parallelism: between those, the residual stream and the LayerNorms
  (``SequenceParallel``) are sharded along the sequence, so the norms' activations are
  split too instead of being replicated on every TP rank.
- the token embedding is split by vocabulary rows (row-wise); the LM head, tied to it,
  column-wise with its logits gathered, so the loss is the plain ``cross_entropy``.

``c_attn`` packs q, k and v in one ``(3 x n_embd, n_embd)`` Linear. A column-wise split of
that matrix as stored would give rank 0 all of q and half of k. Before splitting, its rows
are regrouped per rank (`group_qkv`: rank r's q rows, then its k rows, then its v rows),
so each rank's contiguous shard holds whole heads of q, k and v and the attention code
splits its local projection in three (`workloads.training.model`). Checkpoints store the
standard order (`CheckpointLayout`): a checkpoint written at ``--tp 2`` is the same
tensors as one written at ``--tp 1``, and DCP reshards it into either layout.

The data-parallel rank, not the global one, picks the batch: the ``tp`` ranks of one
group must see the same tokens (`data_coords`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.parallel.style import ParallelStyle

from modules.validation import InvalidArgsError, Problem
from workloads.training import compat
from workloads.training.config import TrainConfig
from workloads.training.distributed import Topology
from workloads.training.engine import Resolved

#: The state-dict names (and optimizer-state keys) of the packed q/k/v projection.
QKV_SUFFIXES = (".attn.c_attn.weight", ".attn.c_attn.bias")


@dataclass(frozen=True)
class MeshShape:
    """How a world of ranks is split: ``dp`` data-parallel groups of ``tp`` ranks."""

    dp: int
    tp: int


def mesh_shape(config: TrainConfig, world_size: int) -> MeshShape:
    """The ``(dp, tp)`` split of ``world_size`` ranks; `InvalidArgsError` where ``--tp``
    does not divide the world size."""
    tp = config.tp
    if world_size % tp:
        raise InvalidArgsError(
            [
                Problem(
                    "tp",
                    str(tp),
                    f"a divisor of the world size ({world_size}): the ranks are "
                    "split into groups of --tp",
                )
            ]
        )
    return MeshShape(world_size // tp, tp)


def data_coords(config: TrainConfig, topology: Topology) -> tuple[int, int]:
    """``(data rank, data-parallel size)``: which batch this rank reads, of how many.
    TP groups are consecutive ranks (one node's GPUs), so the data rank is the group's.
    `InvalidArgsError` where ``--tp`` does not divide the world size."""
    return topology.rank // config.tp, mesh_shape(config, topology.world_size).dp


def group_qkv(packed: Tensor, tp: int) -> Tensor:
    """``c_attn``'s rows (or bias) from the stored order ``[q; k; v]`` to the order a
    column-wise split over ``tp`` ranks needs: ``[q_0; k_0; v_0; q_1; k_1; v_1; ...]``,
    where ``q_r`` is rank r's slice of q (whole heads when ``tp`` divides n_head)."""
    rows = packed.shape[0]
    tail = packed.shape[1:]
    return packed.reshape(3, tp, rows // (3 * tp), *tail).transpose(0, 1).reshape(packed.shape)


def ungroup_qkv(grouped: Tensor, tp: int) -> Tensor:
    """The inverse of `group_qkv`: the stored ``[q; k; v]`` order."""
    rows = grouped.shape[0]
    tail = grouped.shape[1:]
    return grouped.reshape(tp, 3, rows // (3 * tp), *tail).transpose(0, 1).reshape(grouped.shape)


def _is_qkv(name: str) -> bool:
    return name.endswith(QKV_SUFFIXES)


def _reorder(tensor: Tensor, order: Callable[[Tensor, int], Tensor], tp: int) -> Tensor:
    """``order`` applied to a (sharded) DTensor's global rows, in the same placements.
    The whole tensor is gathered for a moment: one ``c_attn`` matrix at a time."""
    if not isinstance(tensor, DTensor):
        return order(tensor, tp)
    full = order(tensor.full_tensor(), tp)
    # Every rank holds the same full tensor: each keeps its own slice, nothing is sent.
    return distribute_tensor(full, tensor.device_mesh, tensor.placements, src_data_rank=None)


class CheckpointLayout:
    """Converts the ``c_attn`` tensors of a TP model's state dicts (model and optimizer,
    as `torch.distributed.checkpoint.state_dict.get_state_dict` returns them) between
    the per-rank grouped order the model computes with and the stored ``[q; k; v]``
    order every layout saves, so checkpoints reshard between ``--tp`` values.

    Args:
        tp: the run's tensor-parallel degree.
    """

    def __init__(self, tp: int) -> None:
        self.tp = tp

    def _convert(
        self, model_sd: dict[str, Any], optim_sd: dict[str, Any], order: Callable[..., Tensor]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        model_out = {
            name: _reorder(value, order, self.tp) if _is_qkv(name) else value
            for name, value in model_sd.items()
        }
        states = optim_sd.get("state", {})
        optim_out = dict(optim_sd)
        optim_out["state"] = {
            name: (
                {
                    key: _reorder(value, order, self.tp)
                    if isinstance(value, Tensor) and value.dim() >= 1
                    else value
                    for key, value in per_param.items()
                }
                if _is_qkv(name)
                else per_param
            )
            for name, per_param in states.items()
        }
        return model_out, optim_out

    def to_saved(
        self, model_sd: dict[str, Any], optim_sd: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The state dicts in the stored order (what is written)."""
        return self._convert(model_sd, optim_sd, ungroup_qkv)

    def from_saved(
        self, model_sd: dict[str, Any], optim_sd: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Loaded state dicts back in the model's grouped order."""
        return self._convert(model_sd, optim_sd, group_qkv)


def _gather_sequence() -> PrepareModuleInput:
    """A half-block's input: sequence-sharded in the residual stream, all-gathered for
    the column-wise layer."""
    return PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))


def _block_plan() -> dict[str, ParallelStyle]:
    """Megatron's split of one block, with the norms sequence-parallel; each half ends
    in a reduce-scatter back to the sequence-sharded residual stream."""
    return {
        "ln_1": SequenceParallel(),
        "attn": _gather_sequence(),
        "attn.c_attn": ColwiseParallel(),  # rows regrouped first: whole heads per rank
        "attn.c_proj": RowwiseParallel(output_layouts=Shard(1)),
        "ln_2": SequenceParallel(),
        "mlp": _gather_sequence(),
        "mlp.c_fc": ColwiseParallel(),
        "mlp.c_proj": RowwiseParallel(output_layouts=Shard(1)),
    }


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Split ``model`` (a `workloads.training.model.GPT`, on every rank identical) over
    ``tp_mesh`` in place."""
    tp = tp_mesh.size()
    gpt: Any = model
    with torch.no_grad():
        for block in gpt.blocks:
            block.attn.c_attn.weight.copy_(group_qkv(block.attn.c_attn.weight, tp))
            block.attn.c_attn.bias.copy_(group_qkv(block.attn.c_attn.bias, tp))
    top: dict[str, ParallelStyle] = {
        "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        # (seq, width) position rows, reduce-scattered to Shard(0): the same sequence
        # slice as the token embeddings' Shard(1), so their sum needs no more traffic.
        "wpe": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
        "ln_f": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    parallelize_module(gpt, tp_mesh, top)
    # Both splits put the shared (vocabulary, width) matrix in Shard(0): tie them again.
    gpt.lm_head.weight = gpt.wte.weight
    for block in gpt.blocks:
        parallelize_module(block, tp_mesh, _block_plan())


def describe(tp: int, dp: int) -> str:
    """The layout's name in the run's first log line (empty without TP)."""
    if tp <= 1:
        return ""
    return f"tp{tp}" + (f" x fsdp2 over {dp} groups" if dp > 1 else "")


def parallelize_tp(
    model: nn.Module, config: TrainConfig, resolved: Resolved, topology: Topology
) -> nn.Module:
    """Build the 2-D mesh, split ``model`` over its ``tp`` dimension and shard it with
    FSDP2 over its ``dp`` dimension (when there is more than one group)."""
    shape = mesh_shape(config, topology.world_size)
    mesh = init_device_mesh(resolved.device.type, (shape.dp, shape.tp), mesh_dim_names=("dp", "tp"))
    apply_tp(model, mesh["tp"])
    gpt: Any = model
    if resolved.compile:  # each block after its split, before FSDP2 (as torchtitan)
        mode = {} if resolved.compile_mode == "default" else {"mode": resolved.compile_mode}
        for block in gpt.blocks:
            block.compile(**mode)
    if shape.dp > 1:
        api = compat.fsdp_api()
        policy = api.mixed_precision_policy(
            param_dtype=resolved.amp_dtype, reduce_dtype=torch.float32
        )
        for block in gpt.blocks:
            api.fully_shard(block, mesh=mesh["dp"], mp_policy=policy)
        api.fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
    return model
