"""``make distill TEACHER=<checkpoint> PRESET=<student> OUT=<dir>``: train a smaller student
preset from a teacher checkpoint with logit distillation.

The student learns from a mix of two losses on the teacher's own training data (the
data directory its ``run.json`` names, verified against its manifest when it has one):

- the soft loss: ``T^2 * KL(softmax(teacher / T) || softmax(student / T))`` over the
  real vocabulary (the padded logit rows are left out), with temperature ``T``
  (default 1.0, chosen by measurement: `DEFAULT_TEMPERATURE`); the ``T^2`` keeps its
  gradients on the hard loss's scale as ``T`` changes (Hinton et al., 2015);
- the hard loss: the usual next-token cross-entropy on the data's labels.

``loss = alpha * soft + (1 - alpha) * hard``, ``alpha`` 0.5 by default. The teacher
runs in eval mode without gradients; only the student trains.

The output is a normal checkpoint directory: ``step_<N>`` DCP checkpoints (model,
AdamW state, data position, RNG) and ``run.json`` with the student's config, so
``make export CHECKPOINT=<OUT>`` exports it, ``make train ARGS="--ckpt-dir <OUT>"``
resumes it, and running the same ``make distill`` again resumes the distillation.
``distill.json`` records the teacher and the loss settings.

Before any work every input is checked, each failure one line naming what to fix:
the teacher exists, is a complete torch-engine checkpoint whose files are intact and
whose ``run.json`` describes its shapes; the student has the teacher's vocabulary
(same tokeniser), a sequence length within the teacher's context, and fewer
parameters; ``OUT`` is absent, empty or an earlier distillation from the same teacher.

One process, on the GPU when there is one (bf16 autocast), else the CPU (fp32).
The loop (`fit`) is also the recovery fine-tune of `workloads.training.prune`.

Exit status: 0 done, 2 a bad input (one line), 130 / 143 stopped by SIGINT / SIGTERM
after a checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias
from torch import Tensor
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from modules.validation import InvalidArgsError
from workloads.data.byte_tokenizer import ensure_shards
from workloads.data.manifest import ManifestError, verify_dataset
from workloads.data.shard_format import shard_files
from workloads.data.shards import ShardError, ShardLoader
from workloads.training.checkpoint import (
    METADATA_FILE,
    STEP_PREFIX,
    Checkpointer,
    CheckpointError,
    checkpoint_engine,
    checkpoint_problem,
    engine_problem,
    latest_checkpoint,
    shape_problem,
)
from workloads.training.compat import dcp_kwargs
from workloads.training.config import (
    TrainConfig,
    add_override_arguments,
    describe_problems,
    override,
    override_values,
    preset,
)
from workloads.training.engine import (
    DeviceBatches,
    Resolved,
    apply_backend_flags,
    build_model,
    build_optimizer,
    learning_rate,
    resolve,
)
from workloads.training.lineage import (
    RUN_RECORD,
    RunRecord,
    git_revision,
    read_run_record,
    write_run_record,
)
from workloads.training.model import GPT
from workloads.training.train import StopRequest

EXIT_OK = 0
EXIT_USER_ERROR = 2
#: Softening temperature of both distributions. Measured on this repository's presets
#: (a 200-step ``small`` teacher, a ``tiny`` student, held-out loss after 100 / 300 steps;
#: labels alone: 2.477 / 1.939): T=1 2.463 / 1.897, T=2 2.668 / 2.011, T=4 3.041 (alpha
#: 0.5). A student this small cannot follow the flattened distribution a higher T gives
#: (Hinton et al.'s T of 2-20 was for far larger students); 1 is the default.
DEFAULT_TEMPERATURE = 1.0
#: Weight of the soft (KL) loss; ``1 - alpha`` goes to the hard-label loss.
DEFAULT_ALPHA = 0.5
#: The file that marks a directory as this command's output (and what it was made from).
DISTILL_RECORD = "distill.json"
#: Held-out windows the command's summary line measures the loss on.
EVAL_BATCHES = 8


class DistillError(Exception):
    """A bad input: one line naming what to fix."""


# --- the loss ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LossParts:
    """One step's loss and its two parts (detached, on the device)."""

    total: Tensor
    hard: Tensor
    soft: Tensor


def distillation_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    targets: Tensor,
    *,
    vocab_size: int,
    temperature: float = DEFAULT_TEMPERATURE,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[Tensor, LossParts]:
    """``alpha * T^2 * KL(p_teacher^T || p_student^T) + (1 - alpha) * CE(student, targets)``.

    Args:
        student_logits: ``(..., rows)`` student logits (rows >= ``vocab_size``).
        teacher_logits: ``(..., rows)`` teacher logits, same leading shape.
        targets: ``(...)`` next-token ids, all below ``vocab_size``.
        vocab_size: the tokeniser's vocabulary; padded rows beyond it are left out of
            both terms (they are never a target, and the two models' paddings may differ).
        temperature: softening temperature ``T`` (> 0) of the soft term.
        alpha: weight of the soft term, in [0, 1] (0: plain cross-entropy).

    Returns the loss (mean over tokens, fp32) and its parts. The KL is computed in
    fp32 from log-probabilities (``log_target``), so it is exact where the teacher
    gives a token almost no mass.
    """
    student = student_logits[..., :vocab_size].float().reshape(-1, vocab_size)
    flat_targets = targets.reshape(-1)
    hard = F.cross_entropy(student, flat_targets)
    if alpha == 0.0:
        soft = torch.zeros((), device=hard.device)
    else:
        teacher = teacher_logits[..., :vocab_size].float().reshape(-1, vocab_size)
        soft = F.kl_div(
            F.log_softmax(student / temperature, dim=-1),
            F.log_softmax(teacher / temperature, dim=-1),
            reduction="batchmean",
            log_target=True,
        ) * (temperature**2)
    total = alpha * soft + (1.0 - alpha) * hard
    return total, LossParts(total.detach(), hard.detach(), soft.detach())


# --- checkpoints in and out --------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A checkpoint read as a teacher (or as the model to prune).

    Args:
        config: its run's config (from ``run.json``).
        step: its step.
        step_dir: its ``step_<N>`` directory.
        root: its checkpoint directory (where ``run.json`` is).
    """

    config: TrainConfig
    step: int
    step_dir: Path
    root: Path


def find_source(path: Path, what: str = "TEACHER") -> Source:
    """The checkpoint at ``path`` (a ``step_<N>`` directory, a ``--ckpt-dir``, or a run
    directory with a ``ckpt/`` in it), checked to be complete, intact and described by
    its ``run.json``. `DistillError` (naming ``what``) otherwise."""
    if not path.exists():
        raise DistillError(f"{what} {path}: no such directory; give a training run's --ckpt-dir")
    if not path.is_dir():
        raise DistillError(f"{what} {path}: not a directory (a checkpoint is one)")
    found: tuple[int, Path] | None = None
    if path.name.startswith(STEP_PREFIX):
        if checkpoint_engine(path) is None:
            raise DistillError(
                f"{what} {path} is incomplete (no {METADATA_FILE}: its save was interrupted); "
                "give an earlier step or the checkpoint directory"
            )
        suffix = path.name.removeprefix(STEP_PREFIX)
        found = (int(suffix) if suffix.isdigit() else 0, path)
    else:
        found = latest_checkpoint(path) or latest_checkpoint(path / "ckpt")
    if found is None:
        raise DistillError(
            f"{what} {path} holds no complete checkpoint ({STEP_PREFIX}<N>/{METADATA_FILE}); "
            "give a training run's --ckpt-dir"
        )
    step, step_dir = found
    problem = engine_problem(step_dir, "torch")
    if problem is not None:
        raise DistillError(f"{what}: {problem.split(';')[0]}; give a torch-engine run's checkpoint")
    problem = checkpoint_problem(step_dir)
    if problem is not None:
        raise DistillError(f"{what} checkpoint {step_dir} is corrupt: {problem}")
    root = step_dir.parent
    try:
        record = read_run_record(root)
    except ValueError as err:
        raise DistillError(f"{what}: {err}") from err
    if record is None:
        raise DistillError(
            f"{what} {root} has no {RUN_RECORD} (the config of the run that wrote it); "
            "give the --ckpt-dir of a run of make train"
        )
    config = record.config
    with torch.device("meta"):  # shapes only
        shapes = {k: tuple(v.shape) for k, v in _plain_model(config).state_dict().items()}
    shapes.pop("lm_head.weight", None)  # tied to wte.weight
    problem = shape_problem(step_dir, shapes)
    if problem is not None:
        detail = problem.split(": it ", 1)[-1].split(". Point", 1)[0]
        raise DistillError(
            f"{what} checkpoint {step_dir} does not hold the model its {RUN_RECORD} describes: "
            f"it {detail}"
        )
    return Source(config, step, step_dir, root)


def _plain_model(config: TrainConfig) -> GPT:
    return GPT(config.model, use_sdpa=config.sdpa, pad_vocab=config.pad_vocab)


def load_source_model(source: Source, device: torch.device) -> GPT:
    """``source``'s model with its weights (whatever world size wrote them), in eval mode."""
    torch.manual_seed(0)  # the init is overwritten; seeded only so nothing is random
    model = _plain_model(source.config)
    state = model.state_dict()
    saved = FileSystemReader(str(source.step_dir)).read_metadata().state_dict_metadata
    wanted = {"model": {k: v for k, v in state.items() if f"model.{k}" in saved}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp_load(wanted, checkpoint_id=str(source.step_dir), **dcp_kwargs(dcp_load, True))
    model.load_state_dict(wanted["model"], strict=False)
    return model.to(device).eval()


def check_output(out: Path, source: Source, kind: str) -> bool:
    """Whether ``out`` holds an earlier run of this command from ``source`` (resume);
    False when it is absent or empty. `DistillError` when it is anything else, or
    inside the source's checkpoint directory."""
    target, root = out.resolve(), source.root.resolve()
    if target == root or root in target.parents or target in root.parents:
        raise DistillError(
            f"OUT {out} overlaps the source checkpoint directory {source.root}; choose an OUT= "
            "outside it"
        )
    if not out.exists():
        return False
    if not out.is_dir():
        raise DistillError(f"OUT {out} is a file; give a directory (absent or empty)")
    if not any(out.iterdir()):
        return False
    marker = out / f"{kind}.json"
    try:
        made_from = json.loads(marker.read_text(encoding="utf-8")).get("source", "")
    except (OSError, ValueError, AttributeError):
        raise DistillError(
            f"OUT {out} is not empty and is not an earlier make {kind} output (no readable "
            f"{marker.name}); nothing was changed. Give an absent or empty OUT="
        ) from None
    if made_from != str(source.step_dir.resolve()):
        raise DistillError(
            f"OUT {out} holds a make {kind} output from {made_from}, not {source.step_dir}; "
            "give another OUT= (nothing was changed)"
        )
    return True


def write_marker(out: Path, kind: str, body: dict[str, Any]) -> None:
    """``<kind>.json`` into ``out``: what the output was made from and how."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{kind}.json.tmp"
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / f"{kind}.json")


# --- training --------------------------------------------------------------------------


def training_device() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def one_process_loader(config: TrainConfig, files: list[Path] | None = None) -> ShardLoader:
    """A loader of ``config``'s batches for a world of one: over ``files``, or the
    training shards of its data directory (made from its corpus when it is empty)."""
    return ShardLoader(
        files if files is not None else ensure_shards(Path(config.data_dir), Path(config.corpus)),
        batch=config.micro_batch_size,
        seq_len=config.seq_len,
        rank=0,
        world_size=1,
        vocab_size=config.model.padded_vocab_size(config.pad_vocab),
    )


def eval_loss(
    model: GPT, config: TrainConfig, device: torch.device, batches: int = EVAL_BATCHES
) -> float:
    """Mean next-token cross-entropy of ``model`` on the first ``batches`` batches of
    the data directory's ``val_*`` shards (its train shards when it has none)."""
    data_dir = Path(config.data_dir)
    files = shard_files(data_dir, "val") or shard_files(data_dir, "train")
    loader = one_process_loader(config, files)
    was_training = model.training
    model.eval()
    total = 0.0
    with torch.no_grad():
        for _ in range(batches):
            inputs, targets = (t.to(device) for t in loader.next_batch())
            logits = model.logits(inputs)[..., : config.model.vocab_size].float()
            total += float(F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
    model.train(was_training)
    return total / batches


@dataclass(frozen=True)
class FitResult:
    """How a `fit` ended: its exit status and the loss it logged first and last."""

    status: int
    first_loss: float | None
    last_loss: float | None
    resumed_from: int


def fit(
    config: TrainConfig,
    model: GPT,
    *,
    teacher: GPT | None,
    temperature: float = DEFAULT_TEMPERATURE,
    alpha: float = DEFAULT_ALPHA,
    say: Callable[[str], None] = print,
) -> FitResult:
    """Train ``model`` (already on its device) for ``config.steps`` steps on
    ``config.data_dir``, checkpointing into ``config.ckpt_dir`` (resuming from it).

    With a ``teacher`` the loss is `distillation_loss`; without one, the plain
    cross-entropy (``alpha`` is then ignored). Checkpoints are the trainer's: a model
    built from ``config`` and AdamW with the trainer's parameter groups.
    """
    device = next(model.parameters()).device
    resolved = _resolve(config, device)
    apply_backend_flags(resolved)
    optimizer = build_optimizer(model, config, resolved)
    batches = DeviceBatches(one_process_loader(config), resolved)
    checkpointer = Checkpointer(
        Path(config.ckpt_dir), rank=0, device=device, group=None, use_async=False,
        keep=config.ckpt_keep,
    )  # fmt: skip
    global_batch = config.micro_batch_size * config.grad_accum_steps
    start = 0
    resumed = checkpointer.load_latest(model, optimizer)
    if resumed is not None:
        start = resumed.step
        batches.load_state(resumed.loader)
        say(f"resume: from {resumed.path} at step {start}")
    if start >= config.steps:
        say(f"already at step {start} of {config.steps}; nothing to do")
        return FitResult(EXIT_OK, None, None, start)
    soft_weight = alpha if teacher is not None else 0.0
    autocast = torch.autocast(
        device_type=device.type,
        dtype=resolved.amp_dtype or torch.bfloat16,
        enabled=resolved.amp_dtype is not None,
    )
    log_path = Path(config.log_jsonl) if config.log_jsonl else None
    stop = StopRequest()
    first: float | None = None
    last: float | None = None
    try:
        model.train()
        for step in range(start + 1, config.steps + 1):
            started = time.perf_counter()
            sums = torch.zeros(3, device=device)
            for _ in range(config.grad_accum_steps):
                inputs, targets = batches.next()
                with autocast:
                    logits = model.logits(inputs)
                    teacher_logits = logits
                    if teacher is not None:
                        with torch.no_grad():
                            teacher_logits = teacher.logits(inputs)
                loss, parts = distillation_loss(
                    logits, teacher_logits, targets, vocab_size=config.model.vocab_size,
                    temperature=temperature, alpha=soft_weight,
                )  # fmt: skip
                (loss / config.grad_accum_steps).backward()  # type: ignore[no-untyped-call]
                sums += torch.stack([parts.total, parts.hard, parts.soft])
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, config)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step % config.log_every == 0 or step in (start + 1, config.steps):
                total, hard, soft = (sums / config.grad_accum_steps).tolist()
                first = total if first is None else first
                last = total
                say(
                    f"step {step:>5}/{config.steps} | loss {total:.4f} | hard {hard:.4f} | "
                    f"soft {soft:.4f} | {(time.perf_counter() - started) * 1000:.0f} ms"
                )
                if log_path is not None:
                    with log_path.open("a", encoding="utf-8") as handle:
                        record = {"step": step, "loss": total, "hard": hard, "soft": soft}
                        handle.write(json.dumps(record) + "\n")
            stopping = stop.requested
            if (
                stopping
                or step == config.steps
                or (config.ckpt_every and step % config.ckpt_every == 0)
            ):
                path = checkpointer.save(
                    step, model, optimizer, batches.state, blocking=True, global_batch=global_batch
                )
                say(f"checkpoint: step {step} -> {path}")
            if stopping:
                say(f"{stop.signum.name}: stopped after step {step} with a checkpoint")
                return FitResult(stop.status, first, last, start)
    finally:
        stop.restore()
        batches.close()
    return FitResult(EXIT_OK, first, last, start)


def _resolve(config: TrainConfig, device: torch.device) -> Resolved:
    # One process, eager: the logits are needed whole (for the KL), so neither the
    # chunked loss nor torch.compile of forward() applies.
    return dataclasses.replace(resolve(config, device), compile=False, loss_chunk=0)


# --- the command -----------------------------------------------------------------------


def student_config(
    teacher: TrainConfig, student_preset: str, out: Path, values: dict[str, str]
) -> TrainConfig:
    """The student's config: its preset on the teacher's data, checkpointing into
    ``out``, with the command-line ``values`` applied."""
    for fixed in ("data_dir", "corpus", "ckpt_dir"):
        if fixed in values:
            raise DistillError(
                f"--{fixed.replace('_', '-')} is set by make distill (the teacher's data, "
                "OUT=); leave it out"
            )
    base = {
        "data_dir": teacher.data_dir,
        "corpus": teacher.corpus,
        "ckpt_dir": str(out),
        "metrics_port": "0",
        "pad_vocab": "on" if teacher.pad_vocab else "off",
    }
    return override(preset(student_preset), base | values)


def check_student(teacher: TrainConfig, student: TrainConfig) -> None:
    """`DistillError` unless ``student`` can learn from ``teacher``: the same vocabulary,
    a sequence the teacher covers, and fewer parameters."""
    t, s = teacher.model, student.model
    if s.vocab_size != t.vocab_size:
        raise DistillError(
            f"the student's vocabulary ({s.vocab_size}) is not the teacher's ({t.vocab_size}): "
            "distillation needs the same tokeniser; pick a preset with vocab_size "
            f"{t.vocab_size} or pass --vocab-size {t.vocab_size}"
        )
    if student.seq_len > t.block_size:
        raise DistillError(
            f"the student's --seq-len {student.seq_len} is longer than the teacher's context "
            f"({t.block_size}); pass --seq-len {t.block_size} or less"
        )
    with torch.device("meta"):
        t_params = _plain_model(teacher).num_parameters()
        s_params = _plain_model(student).num_parameters()
    if s_params >= t_params:
        raise DistillError(
            f"the student ({student.preset}: {s_params / 1e6:.2f}M parameters) is not smaller "
            f"than the teacher ({teacher.preset}: {t_params / 1e6:.2f}M); pick a smaller PRESET= "
            "or shrink it (--n-layer, --n-embd)"
        )


def run(
    teacher_path: Path,
    student_preset: str,
    out: Path,
    values: dict[str, str],
    *,
    temperature: float = DEFAULT_TEMPERATURE,
    alpha: float = DEFAULT_ALPHA,
    say: Callable[[str], None] = print,
) -> int:
    """The command: check every input, then distil; returns the exit status."""
    if not temperature > 0 or not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise DistillError("--temperature must be > 0 and --alpha in [0, 1]")
    source = find_source(teacher_path)
    config = student_config(source.config, student_preset, out, values)
    check_student(source.config, config)
    resuming = check_output(out, source, "distill")
    dataset = verify_dataset(Path(config.data_dir))
    device = training_device()
    resolve(config, device)  # an impossible switch (bf16 on this CPU) fails here, not later
    teacher = load_source_model(source, device)
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = build_model(config, _resolve(config, device))
    t_params, s_params = teacher.num_parameters(), student.num_parameters()
    say(
        f"distill: teacher {source.step_dir} ({source.config.preset}, {t_params / 1e6:.2f}M "
        f"params) -> student {config.preset} ({s_params / 1e6:.2f}M params) in {out}"
        + (" (resuming)" if resuming else "")
    )
    say(
        f"distill: data {config.data_dir}"
        + (f" (dataset {dataset.name} version {dataset.digest})" if dataset else "")
        + f"; loss {alpha:g} x T^2 KL (T={temperature:g}) + {1 - alpha:g} x cross-entropy"
    )
    write_marker(
        out,
        "distill",
        {
            "source": str(source.step_dir.resolve()),
            "teacher_preset": source.config.preset,
            "teacher_step": source.step,
            "temperature": temperature,
            "alpha": alpha,
        },
    )
    write_run_record(out, RunRecord(config, git_revision()))
    result = fit(config, student, teacher=teacher, temperature=temperature, alpha=alpha, say=say)
    if result.status != EXIT_OK:
        return result.status
    loss_t = eval_loss(teacher, config, device)
    loss_s = eval_loss(student, config, device)
    say(
        f"distill: held-out loss teacher {loss_t:.4f}, student {loss_s:.4f}; checkpoint in {out} "
        f"(make export CHECKPOINT={out})"
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.training.distill",
        description="Distil a teacher checkpoint into a smaller student preset.",
    )
    parser.add_argument("--teacher", type=Path, required=True, help="checkpoint or run dir")
    parser.add_argument("--out", type=Path, required=True, help="output checkpoint directory")
    parser.add_argument(
        "--temperature", type=float, default=DEFAULT_TEMPERATURE, help="softening T (1.0)"
    )
    parser.add_argument(
        "--alpha", type=float, default=DEFAULT_ALPHA, help="weight of the soft loss (0.5)"
    )
    add_override_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(
            args.teacher,
            args.preset,
            args.out,
            override_values(args),
            temperature=args.temperature,
            alpha=args.alpha,
        )
    except InvalidArgsError as err:
        print(describe_problems(err, "student config"), file=sys.stderr)
    except (DistillError, ShardError, ManifestError, CheckpointError) as err:
        print(f"distill: {err}", file=sys.stderr)
    return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
