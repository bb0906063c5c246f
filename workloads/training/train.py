"""Train a preset: ``torchrun --nproc_per_node=N -m workloads.train --preset tiny``.

One process per device; rank and world size come from torchrun's environment (a
plain ``python -m workloads.train`` is a world of one). Every ``log_every`` steps rank 0
logs loss, step time, tokens/s, TFLOP/s, MFU and the data-wait share, and each node's
local rank 0 exports them as Prometheus metrics. With ``--ckpt-dir`` the run resumes
from the newest readable checkpoint there (a corrupt newer one is named and set aside),
checkpoints every ``--ckpt-every`` steps and at the end, and on SIGTERM (a spot
interruption or a preemption) or SIGINT (Ctrl-C) saves a final checkpoint before exiting
with status 143 or 130, so that a job is retried, not completed.

A data directory with a ``manifest.json`` (`make data`) is verified before step one: a
changed, missing or extra shard stops the run, naming it.

Exit status: 0 done, 2 bad configuration or data (one message, no traceback), 130 / 143
stopped by SIGINT / SIGTERM after its checkpoint. Under `make train`'s launcher each
rank also leaves that message and status for it (`workloads.training.outcome`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist

from modules.validation import InvalidArgsError
from workloads.data.byte_tokenizer import ensure_shards
from workloads.data.manifest import DatasetRef, ManifestError, verify_dataset
from workloads.data.shards import ShardError, ShardLoader
from workloads.training import deepspeed_engine, distributed, fabric, outcome, telemetry, tp
from workloads.training.checkpoint import Checkpointer, CheckpointError
from workloads.training.config import (
    TrainConfig,
    add_override_arguments,
    describe_problems,
    from_namespace,
)
from workloads.training.deepspeed_engine import DeepSpeedCheckpointer
from workloads.training.distributed import Topology, TopologyError
from workloads.training.elastic import BatchPlan, plan_batch
from workloads.training.elastic import describe as describe_plan
from workloads.training.engine import (
    DeviceBatches,
    Resolved,
    Training,
    apply_backend_flags,
    resolve,
)
from workloads.training.engines import setup
from workloads.training.metrics import (
    MetricsExporter,
    ThroughputWindow,
    format_mfu,
    peak_bf16_tflops,
)
from workloads.training.model import flops_per_token
from workloads.training.tracking import start_tracking

EXIT_OK = 0
EXIT_USER_ERROR = 2
#: The signals that stop a run after a step, with a checkpoint: the kubelet's SIGTERM
#: (preemption, spot interruption) and Ctrl-C's SIGINT (which torchrun forwards).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Records SIGTERM and SIGINT; `agreed` makes every rank stop after the same step.
    `restore` puts the previous handlers back (in-process callers keep their Ctrl-C).

    Args:
        check_every: when distributed, the flag is all-reduced (a host-side
            synchronisation of every rank) only after every N-th step, so a signal
            stops the run at most N - 1 steps after the step it arrived in.
    """

    def __init__(self, check_every: int = 1) -> None:
        self.requested = False
        #: The first stop signal received (SIGTERM until one is).
        self.signum = signal.SIGTERM
        self.check_every = max(1, check_every)
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested:
            self.signum = signal.Signals(signum)
        self.requested = True

    @property
    def status(self) -> int:
        """The exit status of a run stopped by the signal: 128 + its number."""
        return 128 + self.signum

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)

    def agreed(self, group: dist.ProcessGroup | None, step: int = 0) -> bool:
        """Whether every rank stops after ``step``; every rank calls it after every
        step (the ranks agree on which steps hold the collective)."""
        if group is None:
            return self.requested
        if step % self.check_every:
            return False
        flag = torch.tensor([1 if self.requested else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        return bool(flag.item())


@dataclass
class RunLog:
    """Rank 0's log: stdout lines and, optionally, JSON lines for tools and tests."""

    enabled: bool
    jsonl: Path | None

    def line(self, message: str) -> None:
        if self.enabled:
            print(message, flush=True)

    def record(self, record: dict[str, object]) -> None:
        if self.enabled and self.jsonl is not None:
            self.jsonl.parent.mkdir(parents=True, exist_ok=True)
            with self.jsonl.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


def _start_exporter(config: TrainConfig, topology: Topology, log: RunLog) -> MetricsExporter | None:
    if topology.local_rank != 0:
        return None
    port, host = config.metrics_port, config.metrics_host
    try:
        exporter = MetricsExporter(port, host=host)
    except OSError as err:
        print(
            f"[rank {topology.rank}] metrics: port {port} unavailable ({err.strerror}); "
            "metrics are not served",
            flush=True,
        )
        return MetricsExporter(0)
    if port:
        log.line(f"metrics: serving training_* on {host}:{port}/metrics")
    return exporter


def _log_gpu_telemetry(topology: Topology, cuda: bool) -> None:
    if topology.local_rank != 0 or not cuda:
        return
    try:
        samples = telemetry.sample_gpus()
    except telemetry.NvmlUnavailableError as err:
        print(f"[rank {topology.rank}] telemetry: {err}", flush=True)
        return
    for sample in samples:
        print(f"[rank {topology.rank}] telemetry: {sample.summary()}", flush=True)


def _maybe_inject_fault(
    config: TrainConfig,
    topology: Topology,
    step: int,
    checkpointer: Checkpointer | DeepSpeedCheckpointer | None,
) -> None:
    """Test hook: SIGKILL this worker, on torchrun's first attempt only."""
    if not (
        config.fault_kill_at_step
        and step == config.fault_kill_at_step
        and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    ):
        return
    # Every rank lets its asynchronous checkpoint write finish and meets the others first,
    # so the fault lands after the last checkpoint is on disk whatever the machine's load:
    # the resume point a test expects is then known (on a busy machine the write of step 4
    # was still running at step 7's kill, and the run restarted from scratch).
    if checkpointer is not None:
        checkpointer.wait()
    if topology.distributed:
        dist.barrier()
    if topology.rank == config.fault_kill_rank:
        print(f"[rank {topology.rank}] fault injection: SIGKILL after step {step}", flush=True)
        if config.fault_kill_node:
            # The agent first, so it cannot restart this worker: the node is gone.
            print(f"[rank {topology.rank}] fault injection: SIGKILL of this node's agent")
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _plan_batch(
    base: TrainConfig, world_size: int, saved_global_batch: int
) -> tuple[TrainConfig, BatchPlan]:
    """``base`` with the accumulation (and, where it cannot be kept exactly, the
    learning rate) that keeps the run's global batch on ``world_size`` ranks."""
    configured = base.micro_batch_size * base.grad_accum_steps * world_size
    target = base.global_batch_size or saved_global_batch or configured
    plan = plan_batch(target, base.micro_batch_size, world_size)
    adjusted = dataclasses.replace(
        base,
        grad_accum_steps=plan.grad_accum_steps,
        learning_rate=base.learning_rate * plan.lr_scale,
    )
    return adjusted, plan


def run(config: TrainConfig, topology: Topology) -> int:
    """Train ``config`` as this process of ``topology``; returns the exit status."""
    # First: a signal during the setup (compiling, loading) still stops the run cleanly.
    stop = StopRequest(config.stop_check_every)
    try:
        return _set_up_and_train(config, topology, stop)
    finally:
        stop.restore()


def _set_up_and_train(config: TrainConfig, topology: Topology, stop: StopRequest) -> int:
    tp.mesh_shape(config, topology.world_size)  # --tp divides the world, before any work
    device = distributed.select_device(topology)
    resolved = resolve(config, device)
    apply_backend_flags(resolved)
    log = RunLog(topology.is_main, Path(config.log_jsonl) if config.log_jsonl else None)
    if topology.local_rank == 0:
        for line in fabric.describe_env(
            os.environ, multi_node=topology.nodes > 1, cuda=device.type == "cuda"
        ):
            print(f"[rank {topology.rank}] {line}", flush=True)
    if (
        int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0
        and os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1"
    ):
        log.line(
            "train WARNING: torchrun --max-restarts without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: "
            "restarted workers may read the previous attempt's addresses from the shared "
            "rendezvous store and hang (pytorch/pytorch#135712); set it in torchrun's environment"
        )
    deepspeed = resolved.engine == "deepspeed"
    if deepspeed:
        deepspeed_engine.import_deepspeed()  # a missing package is exit 2 before any work
    distributed.init_process_group(topology, device)
    control = distributed.cpu_group()
    ckpt_group = distributed.cpu_group()

    dataset: DatasetRef | None = None
    if topology.local_rank == 0:
        # A versioned dataset (`make data`) is checked shard by shard before anything
        # reads it, and before ensure_shards could fill a directory whose shards vanished.
        dataset = verify_dataset(Path(config.data_dir))
        if dataset is not None:
            log.line(
                f"data: dataset {dataset.name} version {dataset.digest}: "
                f"{len(dataset.shards)} shard(s) match its manifest"
            )
        ensure_shards(Path(config.data_dir), Path(config.corpus))
    if topology.distributed:
        dist.barrier(group=control)
    # Under --tp the ranks of a TP group read the same batch: one data rank per group.
    data_rank, data_world = tp.data_coords(config, topology)
    loader = ShardLoader(
        ensure_shards(Path(config.data_dir), Path(config.corpus)),
        batch=config.micro_batch_size,
        seq_len=config.seq_len,
        rank=data_rank,
        world_size=data_world,
        vocab_size=config.model.padded_vocab_size(resolved.pad_vocab),
    )
    checkpointer: Checkpointer | DeepSpeedCheckpointer | None = None
    saved_global_batch = 0
    if config.ckpt_dir and deepspeed:
        checkpointer = DeepSpeedCheckpointer(
            Path(config.ckpt_dir),
            topology=topology,
            device=device,
            group=ckpt_group,
            zero_stage=resolved.zero_stage,
            keep=config.ckpt_keep,
        )
        # DeepSpeed fixes the accumulation when it is set up: read it first.
        saved_global_batch = checkpointer.saved_global_batch()
    base_config = config
    config, batch_plan = _plan_batch(base_config, data_world, saved_global_batch)
    training = setup(config, resolved, topology)
    try:
        if config.ckpt_dir and not deepspeed:
            checkpointer = Checkpointer(
                Path(config.ckpt_dir),
                rank=topology.rank,
                device=device,
                group=ckpt_group,
                use_async=config.async_ckpt,
                keep=config.ckpt_keep,
                layout=tp.CheckpointLayout(config.tp) if config.tp > 1 else None,
            )
        return _train(
            config,
            base_config=base_config,
            batch_plan=batch_plan,
            topology=topology,
            resolved=resolved,
            training=training,
            batches=DeviceBatches(loader, resolved),
            checkpointer=checkpointer,
            log=log,
            control=control,
            stop=stop,
            dataset=dataset,
        )
    finally:
        training.close()


def _train(
    config: TrainConfig,
    *,
    base_config: TrainConfig,
    batch_plan: BatchPlan,
    topology: Topology,
    resolved: Resolved,
    training: Training,
    batches: DeviceBatches,
    checkpointer: Checkpointer | DeepSpeedCheckpointer | None,
    log: RunLog,
    control: dist.ProcessGroup | None,
    stop: StopRequest,
    dataset: DatasetRef | None,
) -> int:
    device = resolved.device
    model, optimizer = training.model, training.optimizer
    data_world = tp.data_coords(config, topology)[1]  # the world size, or its TP groups
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    distributed_label = topology.distributed or resolved.engine != "torch"
    log.line(
        f"train: preset {config.preset}, {training.num_params / 1e6:.2f}M params, world "
        f"{topology.world_size} ({topology.nodes} node(s))"
        + (
            f", {tp.describe(config.tp, data_world) or resolved.strategy}"
            if distributed_label
            else ""
        )
        + f", {resolved.describe()}"
        + (f", {device_name}" if device_name else "")
    )
    start_step = 0
    if checkpointer is not None:
        resumed = checkpointer.load_latest(model, optimizer)
        if resumed is not None:
            for note in resumed.skipped:
                log.line(f"resume: {note}")
            start_step = resumed.step
            batches.load_state(resumed.loader)
            log.line(
                f"resume: from {resumed.path} at step {resumed.step} (data shard "
                f"{resumed.loader.shard}, position {resumed.loader.position}"
                f"{', RNG restored' if resumed.rng_restored else ', RNG not saved for this rank'})"
            )
            if resumed.global_batch and resumed.global_batch != batch_plan.target:
                # DCP resharded the state; the accumulation follows the saved batch.
                config, batch_plan = _plan_batch(base_config, data_world, resumed.global_batch)
    if batch_plan.grad_accum_steps != base_config.grad_accum_steps or not batch_plan.exact:
        log.line(describe_plan(batch_plan, base_config.grad_accum_steps, data_world))
    tokens_per_step = config.tokens_per_micro_step * config.grad_accum_steps * data_world
    log.line(
        f"train: {tokens_per_step} tokens/step = {config.micro_batch_size} seq x {config.seq_len}"
        f" tokens x {config.grad_accum_steps} accum x {data_world} "
        + ("ranks" if config.tp == 1 else f"data-parallel groups of {config.tp} TP ranks")
        + f"; {config.steps} steps"
    )
    if start_step >= config.steps:
        log.line(f"train: already at step {start_step} of {config.steps}; nothing to do")
        return EXIT_OK
    if stop.agreed(control, 0):  # a signal during the setup: no step is started
        return _stopped(stop, topology, log, f"before step {start_step + 1}; nothing to save")

    tracker = start_tracking(
        config,
        is_main=topology.is_main,
        world_size=topology.world_size,
        num_params=training.num_params,
        shards=[info.path for info in batches.loader.infos],
        dataset=dataset,
    )
    exporter = _start_exporter(config, topology, log)
    if exporter is not None:
        exporter.set_step(start_step)
    window = ThroughputWindow(
        tokens_per_step,
        flops_per_token(config.model, training.num_params, config.seq_len),
        topology.world_size,
        peak_bf16_tflops(device_name),
    )
    window_loss = torch.zeros((), device=device)
    first_loss: float | None = None
    last_loss: float | None = None
    for step in range(start_step + 1, config.steps + 1):
        result = training.step(batches, config, step)
        window.add_step(result.data_wait_s)
        window_loss += result.loss
        _maybe_inject_fault(config, topology, step, checkpointer)

        if step % config.log_every == 0 or step == config.steps or step == start_step + 1:
            mean_loss = window_loss / window.steps
            if topology.distributed:  # gloo has no AVG: sum, then divide
                dist.all_reduce(mean_loss, op=dist.ReduceOp.SUM)
                mean_loss /= topology.world_size
            loss_value = float(mean_loss.item())  # also synchronises the device
            stats = window.stats()
            first_loss = loss_value if first_loss is None else first_loss
            last_loss = loss_value
            log.line(
                f"step {step:>6}/{config.steps} | loss {loss_value:.4f} | "
                f"step {stats.step_time_s * 1000:8.1f} ms | {stats.tokens_per_s:10.0f} tok/s | "
                f"{stats.tflops:7.3f} TFLOP/s | MFU {format_mfu(stats.mfu)} | "
                f"data wait {100 * stats.data_wait_ratio:.1f}%"
            )
            log.record(
                {
                    "step": step,
                    "loss": loss_value,
                    "step_time_s": stats.step_time_s,
                    "tokens_per_s": stats.tokens_per_s,
                    "tflops": stats.tflops,
                    "mfu": stats.mfu,
                    "data_wait_ratio": stats.data_wait_ratio,
                    "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                    "world_size": topology.world_size,
                    "grad_accum_steps": config.grad_accum_steps,
                }
            )
            tracker.log_step(step, loss_value, stats)
            if exporter is not None:
                exporter.update(step, loss_value, stats)
            if step % (config.log_every * 10) == 0:
                _log_gpu_telemetry(topology, device.type == "cuda")
            window.reset()
            window_loss.zero_()
        elif exporter is not None:
            exporter.set_step(step)

        stopping = stop.agreed(control, step)
        final = step == config.steps
        due = bool(config.ckpt_every) and step % config.ckpt_every == 0
        if checkpointer is not None and (stopping or final or due):
            path = checkpointer.save(
                step,
                model,
                optimizer,
                batches.state,
                blocking=stopping or final,
                global_batch=batch_plan.target,
            )
            asynchronous = (
                not (stopping or final)
                and config.async_ckpt
                and not isinstance(checkpointer, DeepSpeedCheckpointer)
            )
            log.line(f"checkpoint: step {step} -> {path}" + (" (async)" if asynchronous else ""))
            tracker.checkpoint(path)
        if stopping:
            tracker.finish("KILLED")
            saved = " with a checkpoint" if checkpointer else " (no --ckpt-dir: not saved)"
            return _stopped(stop, topology, log, f"after step {step}{saved}")

    if checkpointer is not None:
        checkpointer.wait()
    batches.close()
    tracker.finish()
    log.line(
        f"done: loss {first_loss:.4f} -> {last_loss:.4f} over steps {start_step + 1}-{config.steps}"
    )
    return EXIT_OK


def _stopped(stop: StopRequest, topology: Topology, log: RunLog, what: str) -> int:
    """Say that the run stopped on ``stop``'s signal (rank 0, one line) and return
    the signal's exit status."""
    message = f"{stop.signum.name}: stopped {what}"
    log.line(message)
    if topology.is_main:
        outcome.report(stop.status, message)
    return stop.status


def _refuse(message: str) -> int:
    """Print a refusal (this rank's one message) and leave it for the launcher."""
    print(message, file=sys.stderr)
    outcome.report(EXIT_USER_ERROR, message)
    return EXIT_USER_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.train",
        description="Train a GPT-style model (run under torchrun for several processes).",
    )
    add_override_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = from_namespace(args)
        topology = distributed.read_topology()
    except InvalidArgsError as err:
        return _refuse(describe_problems(err))
    except TopologyError as err:
        return _refuse(f"train: bad torchrun environment: {err}")
    started = time.perf_counter()
    try:
        status = run(config, topology)
    except InvalidArgsError as err:
        return _refuse(describe_problems(err))
    except (ShardError, ManifestError, CheckpointError) as err:
        return _refuse(f"train: {err}")
    finally:
        distributed.shutdown()
    if topology.is_main and status == EXIT_OK:
        print(f"train: finished in {time.perf_counter() - started:.1f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
