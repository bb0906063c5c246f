"""Elastic runs: keep the global batch when the world size changes.

An elastic job (``torchrun --nnodes MIN:MAX --rdzv-backend c10d --max-restarts K``)
restarts its workers with however many nodes are left, or have come back, after a
node is lost. Each start of the trainer reads the current ``WORLD_SIZE`` and resumes
from the newest complete checkpoint (DCP reshards it to the new layout). What must
not change with the world size is the optimisation itself: the number of sequences
per optimizer step (the global batch) that the learning rate and schedule were
chosen for. `plan_batch` keeps it by choosing the gradient accumulation:

    global batch = micro-batch x grad accumulation x world size

The target is ``--global-batch-size`` when given, else the global batch the
checkpoint records (the run's first start defines it), else the configured
micro-batch x accumulation x the current world size (a fresh run).

When the target is not a multiple of micro-batch x world size (3 ranks for a batch
of 32 sequences of 16), the nearest reachable global batch is used and the learning
rate is scaled by the square root of (reached / target), the square-root scaling rule
for Adam-type optimizers (Malladi et al., "On the SDEs and Scaling Rules for Adaptive
Gradient Algorithms", NeurIPS 2022); the log says so. The micro-batch is never
changed, so the per-device memory a run was sized for holds on any world size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchPlan:
    """How this start of the run reaches its global batch.

    Args:
        grad_accum_steps: micro-steps per optimizer step on this world size.
        global_batch: sequences per optimizer step this start takes.
        target: the global batch asked for.
        lr_scale: factor on the learning rate (1.0 when ``global_batch == target``).
    """

    grad_accum_steps: int
    global_batch: int
    target: int
    lr_scale: float

    @property
    def exact(self) -> bool:
        return self.global_batch == self.target


def plan_batch(target: int, micro_batch: int, world_size: int) -> BatchPlan:
    """The accumulation that gives ``target`` sequences per optimizer step with
    ``micro_batch`` sequences per rank and micro-step on ``world_size`` ranks, or the
    nearest one (at least one micro-step) with the learning rate scaled to suit."""
    if target < 1 or micro_batch < 1 or world_size < 1:
        raise ValueError(f"target {target}, micro_batch {micro_batch}, world {world_size}")
    per_micro_step = micro_batch * world_size
    accum = max(1, round(target / per_micro_step))
    reached = accum * per_micro_step
    scale = 1.0 if reached == target else math.sqrt(reached / target)
    return BatchPlan(accum, reached, target, scale)


def describe(plan: BatchPlan, configured_accum: int, world_size: int) -> str:
    """One log line for a start whose accumulation or learning rate the plan changed."""
    head = (
        f"elastic: world {world_size}: grad accumulation {configured_accum} -> "
        f"{plan.grad_accum_steps}"
    )
    if plan.exact:
        return f"{head} keeps the global batch of {plan.target} sequences"
    return (
        f"{head}: {plan.global_batch} sequences per step, not the {plan.target} asked for "
        f"(not a multiple of micro-batch x {world_size} ranks); learning rate x "
        f"{plan.lr_scale:.4f} (square-root scaling)"
    )
