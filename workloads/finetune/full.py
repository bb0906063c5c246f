"""``make finetune ... ARGS="--full" NPROC=<n>``: a full fine-tune (every parameter trains)
with FSDP2 over gloo on the CPU, in ``n`` torchrun processes; the output is ``merged/``
(the fine-tuned model, a folder ``AutoModelForCausalLM`` loads) and ``finetune.json``
(``"mode": "full"``); there is no ``adapter/``.

The command's own process checks the settings, BASE, DATA and OUT (`lora.check_and_lock`,
one line and exit 2 for what to fix), holds OUT's lock, makes the hidden ``.<OUT>.partial-*``
sibling and starts ``python -m torch.distributed.run --standalone`` with this module as the
worker. Each worker loads the base, shards every decoder layer (the model's
``_no_split_modules`` classes) with ``fully_shard`` and then the root, and trains on its
rows of each global batch (row ``rank``, ``rank + n``, ...): its summed token loss is scaled
by ``n / tokens in the global batch`` so that FSDP2's averaging reduce-scatter gives the
gradient of the global batch's mean loss, the same as one process on the whole batch. Rank
0 gathers the full state dict (``get_model_state_dict(full_state_dict=True,
cpu_offload=True)``); every rank then leaves the process group, and rank 0 saves the state
into the base's architecture with ``save_pretrained``, loads the folder back and compares
its logits with the sharded model's (``--logit-atol``). The command then checks that the
base did not change and swaps the folder into place whole. Workers that fail give one line:
rank 0's ``finetune:`` message, or the worker's exception with the path of a log of their
whole output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

from workloads import output_lock
from workloads.finetune import lora
from workloads.finetune.lora import IGNORE, Batch, FinetuneError, Options, Result

MAX_NPROC = 64


def _layers(model: Any) -> list[torch.nn.Module]:
    """The decoder layers: modules of the classes transformers keeps whole on one device."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise FinetuneError(
            f"BASE's model class {type(model).__name__} names no decoder layer class "
            "(_no_split_modules); FSDP2 cannot shard it per layer"
        )
    return layers


def _rows(batch: Batch, rank: int, world: int) -> Batch:
    """This rank's rows; a rank left without rows runs one row trained on nothing (every
    rank must take part in each collective)."""
    inputs, targets, mask = (t[rank::world] for t in batch)
    if inputs.shape[0] == 0:
        inputs, mask = batch[0][:1], batch[2][:1]
        targets = torch.full_like(batch[1][:1], IGNORE)
    return inputs, targets, mask


def train(base: Path, data: Path, partial: Path, options: Options) -> None:
    """One worker's part (under torchrun, gloo); rank 0 writes ``partial/merged`` and
    ``partial/finetune.json``."""
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.checkpoint.state_dict import (  # noqa: PLC0415
        StateDictOptions,
        get_model_state_dict,
    )
    from torch.distributed.fsdp import fully_shard  # noqa: PLC0415

    started = time.monotonic()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    lora._quiet_libraries()
    base_digest = lora.folder_digest(base)
    model, tokenizer = lora.load_base(base)
    batches, described, seq_len = lora.training_batches(data, model, tokenizer, options)
    torch.manual_seed(options.seed)
    probe = next(batches)  # also the first training batch
    with torch.no_grad():
        base_logits = model.eval()(input_ids=probe[0], attention_mask=probe[2]).logits
    total = sum(p.numel() for p in model.parameters())
    layers = _layers(model)
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate)
    model.train()
    losses: list[tuple[int, float]] = []
    batch = probe
    for step in range(1, options.steps + 1):
        tokens = int((batch[1] != IGNORE).sum())
        inputs, targets, mask = _rows(batch, rank, world)
        logits = model(input_ids=inputs, attention_mask=mask).logits
        summed = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),
            targets.reshape(-1),
            ignore_index=IGNORE,
            reduction="sum",
        )
        (summed * world / max(tokens, 1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        reduced = summed.detach().clone()
        dist.all_reduce(reduced)
        loss = float(reduced) / max(tokens, 1)
        if not math.isfinite(loss):  # the same value on every rank: all stop
            raise FinetuneError(
                f"the loss is {loss} at step {step}; lower --learning-rate and run again"
            )
        if step == 1 or step % options.log_every == 0 or step == options.steps:
            losses.append((step, round(loss, 6)))
            if rank == 0:
                print(f"finetune: step {step}/{options.steps} loss {loss:.4f}", flush=True)
        batch = next(batches)
    model.eval()
    with torch.no_grad():
        tuned = model(input_ids=probe[0], attention_mask=probe[2]).logits
    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    # The last collective: every rank leaves the group now, before rank 0's minutes of
    # saving and checking, rather than waiting in a barrier for it (a gloo peer that sits
    # in a collective while the other one exits can fail on the closed connection).
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        from transformers import AutoModelForCausalLM  # noqa: PLC0415

        whole = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
        whole.load_state_dict(state)
        whole.save_pretrained(str(partial / lora.MERGED_DIR))
        lora._copy_tokenizer_files(base, partial / lora.MERGED_DIR)
        diff = lora._check_merged(partial / lora.MERGED_DIR, probe, tuned, options.logit_atol)
        result = Result(
            base={
                "path": str(base.resolve()),
                "digest": base_digest,
                "model_type": str(whole.config.model_type),
            },
            data=described,
            options=asdict(options)
            | {"seq_len": seq_len, "nproc": world, "sharded_layers": len(layers)},
            trainable_parameters=int(total),
            total_parameters=int(total),
            losses=losses,
            merged_max_abs_logit_diff=diff,
            max_abs_logit_change_from_base=float((tuned - base_logits).abs().max()),
            seconds=round(time.monotonic() - started, 2),
            versions=lora._versions(),
            mode="full",
        )
        (partial / lora.RECORD_FILE).write_text(result.to_json(), encoding="utf-8")


def _options_args(options: Options) -> list[str]:
    return [
        f"--{name.replace('_', '-')}={value}"
        for name, value in asdict(options).items()
        if name
        in {"steps", "batch_size", "seq_len", "learning_rate", "seed", "log_every", "logit_atol"}
    ]


#: A worker's uncaught exception as torch prints it: ``[rank1]: RuntimeError: ...``.
_WORKER_ERROR = re.compile(r"^\[rank(\d+)\]:\s*([\w.]*(?:Error|Exception|Interrupt)\b.*)$")
#: torchrun's summary of the first failed worker: ``exitcode  : -9 (pid: 123)``.
_ROOT_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def _workers_failed(returncode: int, stderr: str) -> str:
    """The one line for failed workers: rank 0's own ``finetune:`` message (what to fix)
    when there is one; else the worker's exception or torchrun's exit code for it, and
    where the workers' whole output was kept (a new file in the temporary folder)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    ours = [ln for ln in lines if ln.startswith("finetune: ")]
    if ours:
        return f"{ours[-1].removeprefix('finetune: ')}; nothing at OUT changed"
    errors = [m for m in map(_WORKER_ERROR.match, lines) if m]
    codes = [m.group(1) for m in map(_ROOT_EXITCODE.match, lines) if m]
    if errors:
        why = f"rank {errors[-1].group(1)}: {errors[-1].group(2)}"
    elif codes:
        code = int(codes[-1])
        why = f"a worker was killed by signal {-code}" if code < 0 else f"a worker exited {code}"
    else:
        why = f"torchrun exited {returncode}"
    fd, log = tempfile.mkstemp(prefix="finetune-workers-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(stderr)
    return (
        f"the full fine-tune's workers failed ({why}); their output: {log}; nothing at OUT changed"
    )


def finetune(base: Path, data: Path, out: Path, options: Options, nproc: int) -> Result:
    """Fully fine-tune ``base`` on ``data`` in ``nproc`` FSDP2 processes and write ``out``.

    Raises:
        FinetuneError: a bad base, dataset, output or setting, or failed workers (their
            last line); nothing at ``out`` changed.
    """
    if not 1 <= nproc <= MAX_NPROC:
        raise FinetuneError(f"NPROC (--nproc): 1 to {MAX_NPROC}, got {nproc}")
    lock = lora.check_and_lock(base, data, out, options)
    try:
        base_digest = lora.folder_digest(base)
        partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        try:
            command = [
                sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={nproc}", "-m", "workloads.finetune.full",
                str(base), "--data", str(data), "--partial", str(partial),
                *_options_args(options),
            ]  # fmt: skip
            # One thread per worker: n workers on a small machine would oversubscribe it.
            env = os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
            done = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=env, check=False)
            record = partial / lora.RECORD_FILE
            if done.returncode != 0 or not record.is_file():
                raise FinetuneError(_workers_failed(done.returncode, done.stderr))
            result = Result(**json.loads(record.read_text(encoding="utf-8")))
            if lora.folder_digest(base) != base_digest:
                raise FinetuneError(f"BASE {base} changed while fine-tuning; nothing was written")
            lora.check_output(out, base, data)
            output_lock.swap_into_place(partial, out)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    finally:
        lock.release()
    return result


def worker_main(argv: Sequence[str] | None = None) -> int:
    """A torchrun worker: `train`; a `FinetuneError` is one line on rank 0, exit 2."""
    parser = argparse.ArgumentParser(prog="python -m workloads.finetune.full")
    parser.add_argument("base", type=Path)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--partial", type=Path, required=True)
    defaults = Options()
    for name in ("steps", "batch_size", "seq_len", "seed", "log_every"):
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name)
        )
    for name in ("learning_rate", "logit_atol"):
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name)
        )
    args = parser.parse_args(argv)
    options = Options(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        learning_rate=args.learning_rate,
        seed=args.seed,
        log_every=args.log_every,
        logit_atol=args.logit_atol,
    )
    try:
        train(args.base, args.data, args.partial, options)
    except FinetuneError as err:
        if os.environ.get("RANK", "0") == "0":
            print(f"finetune: {err}", file=sys.stderr)
        return lora.EXIT_USER_ERROR
    return lora.EXIT_OK


if __name__ == "__main__":
    sys.exit(worker_main())
