"""``make prune CKPT=<checkpoint> OUT=<dir> HEADS=<fraction or count> MLP=<fraction>``:
structured pruning of attention heads and MLP width, then a short recovery fine-tune.

What is removed is what contributes least to the residual stream on real data. A few
batches of the checkpoint's own training data (``--calibration-batches``, default 8)
run through the model, and each unit is scored by the mean L2 norm of what it adds
to the residual stream at each token:

- an attention head ``h``: ``|| y_h @ W_proj[:, h]^T ||`` (its attention output
  through its slice of the output projection);
- an MLP neuron ``j``: ``|gelu(x W_fc)_j| * || W_proj[:, j] ||``.

Why this score and not the weights' norms: removing a unit changes the block's output
by exactly that contribution, so its size on real inputs is the first-order damage
of removing it; a weight norm ignores how large the unit's inputs are (a head with
large weights that attends to nothing useful scores high). It needs only forward
passes, no gradients, and a few batches are enough to rank the units.

Each block loses the same number of heads (``HEADS``: a fraction such as ``0.5``, or a
whole count such as ``1``, per block; at least one head stays) and the same number of
MLP neurons (``MLP``: a fraction of the width), so the result is still the GPT
architecture with a config that says its shape: ``n_head`` lowered, ``head_dim`` kept
(whole heads go, each head keeps its width: vLLM's CPU attention, for one, takes only
some head sizes), ``mlp_width`` lowered (`workloads.training.config.ModelConfig`).

The pruned model is saved as step 0 of ``OUT`` and fine-tuned for ``--steps`` (default
50) on the same data with the plain cross-entropy (``--alpha`` > 0 distils from the
unpruned model instead, `workloads.training.distill`). ``OUT`` is a normal checkpoint
directory with ``run.json``: ``make export CHECKPOINT=<OUT>`` exports it and
``make train`` with the config's ``--n-head/--head-dim/--mlp-width`` resumes it;
``prune.json`` records the source and what was removed.

Exit status: 0 done, 2 a bad input (one line), 130 / 143 stopped after a checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from modules.validation import InvalidArgsError
from workloads.data.manifest import ManifestError, verify_dataset
from workloads.data.shards import ShardError
from workloads.training.checkpoint import Checkpointer, CheckpointError, latest_checkpoint
from workloads.training.config import (
    ModelConfig,
    TrainConfig,
    add_override_arguments,
    describe_problems,
    override,
    override_values,
)
from workloads.training.distill import (
    DEFAULT_TEMPERATURE,
    EXIT_OK,
    EXIT_USER_ERROR,
    DistillError,
    _resolve,
    check_output,
    eval_loss,
    find_source,
    fit,
    load_source_model,
    one_process_loader,
    training_device,
    write_marker,
)
from workloads.training.engine import build_optimizer
from workloads.training.lineage import RunRecord, git_revision, write_run_record
from workloads.training.model import GPT, Block

DEFAULT_RECOVERY_STEPS = 50
DEFAULT_CALIBRATION_BATCHES = 8


@dataclass(frozen=True)
class Importance:
    """Per-block scores: ``heads`` ``(n_layer, n_head)``, ``neurons`` ``(n_layer, width)``."""

    heads: Tensor
    neurons: Tensor


def importance(model: GPT, batches: Sequence[Tensor]) -> Importance:
    """Mean L2 norm of each head's and each MLP neuron's contribution to the residual
    stream over every token of ``batches`` (token ids, ``(batch, seq)``)."""
    config = model.config
    layers, heads, dim = config.n_layer, config.n_head, config.attn_head_dim
    head_sums = torch.zeros(layers, heads, dtype=torch.float64)
    neuron_sums = torch.zeros(layers, config.mlp_hidden, dtype=torch.float64)
    tokens = 0
    hooks = []

    def attention_hook(layer: int, proj: nn.Linear) -> Callable[..., None]:
        weight = proj.weight.detach().float().view(config.n_embd, heads, dim)

        def hook(_: nn.Module, args: tuple[Tensor, ...]) -> None:
            y = args[0].detach().float().view(*args[0].shape[:-1], heads, dim)
            # Head h's share of the projection: y_h @ W[:, h]^T, (..., heads, n_embd).
            contribution = torch.einsum("...hd,ehd->...he", y, weight)
            head_sums[layer] += contribution.norm(dim=-1).flatten(0, -2).sum(0).double()

        return hook

    def mlp_hook(layer: int, proj: nn.Linear) -> Callable[..., None]:
        column_norms = proj.weight.detach().float().norm(dim=0)

        def hook(_: nn.Module, args: tuple[Tensor, ...]) -> None:
            activation = args[0].detach().float().abs().flatten(0, -2)
            neuron_sums[layer] += (activation.sum(0) * column_norms).double()

        return hook

    for layer, module in enumerate(model.blocks):
        block = cast(Block, module)
        attn_proj, mlp_proj = block.attn.c_proj, block.mlp.c_proj
        hooks.append(attn_proj.register_forward_pre_hook(attention_hook(layer, attn_proj)))
        hooks.append(mlp_proj.register_forward_pre_hook(mlp_hook(layer, mlp_proj)))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for ids in batches:
                model.hidden(ids)
                tokens += ids.numel()
    finally:
        for handle in hooks:
            handle.remove()
        model.train(was_training)
    return Importance((head_sums / tokens).float(), (neuron_sums / tokens).float())


def parse_amount(raw: str, total: int, what: str) -> int:
    """How many of ``total`` units to remove per block: ``raw`` with a ``.`` is a fraction
    (rounded to the nearest whole unit), without one a count. `DistillError` for a value
    that is not a number, negative, or removes every unit."""
    try:
        amount = round(float(raw) * total) if "." in raw else int(raw)
    except ValueError:
        raise DistillError(
            f"{what}={raw!r} is not a number; give a fraction (0.5) or a count (1)"
        ) from None
    if amount < 0 or ("." in raw and not 0.0 <= float(raw) < 1.0):
        raise DistillError(f"{what}={raw} must be a fraction in [0, 1) or a count >= 0")
    if amount >= total:
        raise DistillError(
            f"{what}={raw} removes all {total} per block; at least one must stay "
            f"(at most {total - 1}, or a fraction below 1)"
        )
    return amount


def kept(scores: Tensor, remove: int) -> list[list[int]]:
    """Per row, the indices of the ``scores.shape[1] - remove`` highest, in order."""
    keep = scores.shape[1] - remove
    return [sorted(torch.topk(row, keep).indices.tolist()) for row in scores]


def pruned_config(model: ModelConfig, heads: int, mlp_width: int) -> ModelConfig:
    """``model`` with ``heads`` heads of the same width and an MLP ``mlp_width`` wide."""
    return dataclasses.replace(
        model, n_head=heads, head_dim=model.attn_head_dim, mlp_width=mlp_width
    )


def prune_model(model: GPT, keep_heads: list[list[int]], keep_neurons: list[list[int]]) -> GPT:
    """A new, smaller `GPT` holding ``model``'s weights for the kept heads and neurons
    (the same number in every block) and everything else unchanged."""
    config = model.config
    dim, inner = config.attn_head_dim, config.attn_width
    new_config = pruned_config(config, len(keep_heads[0]), len(keep_neurons[0]))
    torch.manual_seed(0)  # every weight is overwritten below
    pruned = GPT(new_config, use_sdpa=True, pad_vocab=model.vocab_rows != config.vocab_size)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for layer in range(config.n_layer):
        prefix = f"blocks.{layer}."
        head_cols = torch.tensor([h * dim + d for h in keep_heads[layer] for d in range(dim)])
        # c_attn's rows are [q; k; v], each ``inner`` rows, head-major.
        qkv_rows = torch.cat([part * inner + head_cols for part in range(3)])
        neurons = torch.tensor(keep_neurons[layer])
        for name, index, dim_ in (
            ("attn.c_attn.weight", qkv_rows, 0),
            ("attn.c_attn.bias", qkv_rows, 0),
            ("attn.c_proj.weight", head_cols, 1),
            ("mlp.c_fc.weight", neurons, 0),
            ("mlp.c_fc.bias", neurons, 0),
            ("mlp.c_proj.weight", neurons, 1),
        ):
            state[prefix + name] = state[prefix + name].index_select(dim_, index).contiguous()
    pruned.load_state_dict(state)
    return pruned


def calibration_batches(config: TrainConfig, count: int) -> list[Tensor]:
    """The first ``count`` batches of the run's training data (token ids)."""
    loader = one_process_loader(config)
    return [loader.next_batch()[0] for _ in range(count)]


def run(
    ckpt: Path,
    out: Path,
    heads: str,
    mlp: str,
    values: dict[str, str],
    *,
    calibration: int = DEFAULT_CALIBRATION_BATCHES,
    alpha: float = 0.0,
    say: Callable[[str], None] = print,
) -> int:
    """The command: check the inputs, prune, save step 0, fine-tune; the exit status."""
    if calibration < 1 or not 0.0 <= alpha <= 1.0:
        raise DistillError("--calibration-batches must be >= 1 and --alpha in [0, 1]")
    source = find_source(ckpt, "CKPT")
    model_config = source.config.model
    remove_heads = parse_amount(heads, model_config.n_head, "HEADS")
    remove_neurons = parse_amount(mlp, model_config.mlp_hidden, "MLP")
    if remove_heads == 0 and remove_neurons == 0:
        raise DistillError("HEADS and MLP remove nothing; give HEADS=0.5 or MLP=0.5, say")
    for fixed in ("data_dir", "corpus", "ckpt_dir", *dataclasses.asdict(model_config)):
        if fixed in values:
            raise DistillError(
                f"--{fixed.replace('_', '-')} is set by make prune (the source's data and "
                "shape, OUT=); leave it out"
            )
    # An earlier run's output is resumed once its step 0 (the pruned weights) is saved;
    # before that there is nothing to resume and the pruning is done again.
    resuming = check_output(out, source, "prune") and latest_checkpoint(out) is not None
    shape = pruned_config(
        model_config, model_config.n_head - remove_heads, model_config.mlp_hidden - remove_neurons
    )
    settings = {
        "ckpt_dir": str(out),
        "metrics_port": "0",
        "steps": str(DEFAULT_RECOVERY_STEPS),
        "warmup_steps": "5",
        "ckpt_every": "0",
        "log_every": "10",
    }
    config = override(source.config, settings | values)
    config = dataclasses.replace(config, model=shape)
    dataset = verify_dataset(Path(config.data_dir))
    device = training_device()
    original = load_source_model(source, device)
    before = eval_loss(original, config, device)
    say(
        f"prune: {source.step_dir} ({model_config.n_head} heads x {model_config.attn_head_dim}, "
        f"MLP {model_config.mlp_hidden}; held-out loss {before:.4f})"
        + (f", dataset {dataset.name} version {dataset.digest}" if dataset else "")
    )
    if resuming:
        say(f"prune: {out} holds this pruning already; resuming its recovery fine-tune")
        model = GPT(shape, use_sdpa=True, pad_vocab=config.pad_vocab).to(device)
    else:
        scores = importance(
            original, [b.to(device) for b in calibration_batches(config, calibration)]
        )
        keep_heads = kept(scores.heads, remove_heads)
        keep_neurons = kept(scores.neurons, remove_neurons)
        model = prune_model(original.cpu(), keep_heads, keep_neurons).to(device)
        after = eval_loss(model, config, device)
        say(
            f"prune: kept heads {keep_heads} of {model_config.n_head} per block, MLP "
            f"{shape.mlp_hidden} of {model_config.mlp_hidden}; "
            f"{original.num_parameters() / 1e6:.3f}M -> {model.num_parameters() / 1e6:.3f}M "
            f"params; held-out loss {after:.4f} before recovery"
        )
        write_marker(
            out,
            "prune",
            {
                "source": str(source.step_dir.resolve()),
                "source_step": source.step,
                "score": "mean L2 norm of each unit's contribution to the residual stream",
                "calibration_batches": calibration,
                "kept_heads": keep_heads,
                "mlp_width": shape.mlp_hidden,
                "loss_before": before,
                "loss_pruned": after,
            },
        )
        write_run_record(out, RunRecord(config, git_revision()))
        # Step 0: the pruned weights, so an interrupted fine-tune resumes from them.
        optimizer = build_optimizer(model, config, _resolve(config, device))
        Checkpointer(out, rank=0, device=device, group=None, use_async=False).save(
            0,
            model,
            optimizer,
            one_process_loader(config).state,
            blocking=True,
        )
    teacher = original if alpha > 0 else None
    if teacher is not None:
        for p in teacher.parameters():
            p.requires_grad_(False)
    result = fit(
        config, model, teacher=teacher, temperature=DEFAULT_TEMPERATURE, alpha=alpha, say=say
    )
    if result.status != EXIT_OK:
        return result.status
    recovered = eval_loss(model, config, device)
    say(
        f"prune: held-out loss {recovered:.4f} after {config.steps} recovery steps; checkpoint "
        f"in {out} (make export CHECKPOINT={out}; make train resumes it with --n-head "
        f"{shape.n_head} --head-dim {shape.head_dim} --mlp-width {shape.mlp_width})"
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.training.prune",
        description="Remove attention heads and MLP width by importance, then fine-tune.",
    )
    parser.add_argument("--ckpt", type=Path, required=True, help="checkpoint or run dir")
    parser.add_argument("--out", type=Path, required=True, help="output checkpoint directory")
    parser.add_argument("--heads", default="0", help="heads removed per block: 0.5 or 1")
    parser.add_argument("--mlp", default="0", help="fraction of MLP width removed: 0.5")
    parser.add_argument(
        "--calibration-batches",
        type=int,
        default=DEFAULT_CALIBRATION_BATCHES,
        help="batches the importance is measured on (8)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.0,
        help="recovery: weight of distillation from the unpruned model (0: labels only)",
    )
    add_override_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    values = override_values(args)
    try:
        return run(
            args.ckpt,
            args.out,
            args.heads,
            args.mlp,
            values,
            calibration=args.calibration_batches,
            alpha=args.alpha,
        )
    except InvalidArgsError as err:
        print(describe_problems(err, "recovery config"), file=sys.stderr)
    except (DistillError, ShardError, ManifestError, CheckpointError) as err:
        print(f"prune: {err}", file=sys.stderr)
    return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
