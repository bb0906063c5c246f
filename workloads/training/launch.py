"""`make train`: check the run once, in one process, then start torchrun's workers.

Started straight under torchrun, a bad preset, a changed shard or a checkpoint that does
not fit is reported by every rank, followed by each rank's traceback and torchrun's
``ChildFailedError``. This launcher first parses and validates the command line with the
workloads' typed config (`workloads.training.config`) and the paths the run will write,
then, before any worker exists, the data (the directory holds shards, they match their
manifest, each is whole and large enough for a step of every rank) and the checkpoint it
would resume (readable, written by this engine, of this model's shape). Each refusal is
one message and exit status 2.

Only a run that passes is handed to torchrun (``python -m torch.distributed.run``, the
same as the ``torchrun`` script), as a child in a session of its own: the workers' output
reaches the terminal, their errors and torchrun's go to a log file, whose path is printed
when the run fails. A rank that still refuses leaves its message for this launcher
(`workloads.training.outcome`), which prints it once. Ctrl-C (SIGINT) and SIGTERM are
passed to torchrun once; its workers save a checkpoint and stop, and the run exits 130
or 143. Locally the metrics endpoint binds 127.0.0.1 unless ``--metrics-host`` says
otherwise (a pod binds every interface: that is the trainer's default).

Usage: ``python -m workloads.training.launch [--nproc N] -- [--preset tiny] [--steps 60] ...``
(everything after ``--`` is passed to ``python -m workloads.train``).

Exit status: 0 trained, 1 a worker failed (the log's path is printed), 2 bad arguments,
data or checkpoint (nothing started), 130 / 143 stopped by SIGINT / SIGTERM (with a
checkpoint where ``--ckpt-dir`` is set).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn

from modules.validation import Checker, InvalidArgsError
from workloads.data.manifest import ManifestError, verify_dataset
from workloads.data.shard_format import (
    ShardError,
    check_train_shards,
    data_dir_problem,
    shard_files,
)
from workloads.training import outcome
from workloads.training.config import (
    DEFAULT_DATA_DIR,
    TrainConfig,
    add_override_arguments,
    describe_problems,
    from_namespace,
)

EXIT_OK = 0
EXIT_WORKER_FAILED = 1
EXIT_USER_ERROR = 2  # as workloads.train
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: The trainer's exit statuses after a stop signal (a checkpoint where one is kept).
_STOPPED = {128 + signal.SIGINT, 128 + signal.SIGTERM}
_PATH_FIELDS = ("ckpt_dir", "data_dir", "log_jsonl", "corpus")
#: More worker processes than this on one node is a typo, not a machine.
MAX_NPROC = 256
#: Where a workstation's run serves its metrics: this machine only.
LOCAL_METRICS_HOST = "127.0.0.1"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting, so every problem of the
    command line is reported in the launcher's one message."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


class _UsageError(Exception):
    pass


@dataclass(frozen=True)
class Launch:
    """A checked command line.

    Args:
        nproc: worker processes.
        train_args: the trainer's arguments, as torchrun passes them to each worker.
        config: the run's configuration.
        named_data_dir: the user named ``--data-dir`` (another than the default).
        named_corpus: the user named ``--corpus``.
    """

    nproc: int
    train_args: list[str]
    config: TrainConfig
    named_data_dir: bool = False
    named_corpus: bool = False


def _writable_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be used (created if missing) as a directory, or None."""
    if path.exists():
        if not path.is_dir():
            return "exists and is not a directory; point it at a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else "is not writable"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot be created: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: {parent} is not writable"
    return None


def path_problems(paths: Mapping[str, str]) -> InvalidArgsError | None:
    """The paths the run reads and writes (``ckpt_dir``, ``data_dir``, ``log_jsonl``,
    ``corpus``: empty or absent for unset), checked before any process starts. The
    data directory is only read (`data_problem` checks what it holds)."""
    check = Checker()
    ckpt_dir = paths.get("ckpt_dir")
    if ckpt_dir:
        reason = _writable_dir_problem(Path(ckpt_dir))
        check.require(reason is None, "ckpt_dir", ckpt_dir, reason or "")
    data_dir = paths.get("data_dir")
    if data_dir:
        check.require(
            not Path(data_dir).exists() or Path(data_dir).is_dir(),
            "data_dir",
            data_dir,
            "exists and is not a directory; point it at a directory",
        )
    log_jsonl = paths.get("log_jsonl")
    if log_jsonl:
        log = Path(log_jsonl)
        reason = (
            "is a directory; name a file" if log.is_dir() else _writable_dir_problem(log.parent)
        )
        check.require(reason is None, "log_jsonl", log_jsonl, reason or "")
    corpus = paths.get("corpus")
    if corpus:
        check.require(Path(corpus).is_file(), "corpus", corpus, "no such file")
    return InvalidArgsError(check.problems) if check.problems else None


def torchrun_argv(nproc: int, train_args: Sequence[str]) -> list[str]:
    """The torchrun command for one node with ``nproc`` workers."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "workloads.train",
        *train_args,
    ]


def check(argv: Sequence[str]) -> Launch | str:
    """The checked run of a valid command line, or the one message that says what to
    fix. The trainer's arguments are passed on as given, with ``--metrics-host
    127.0.0.1`` added where the user named no address."""
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    ours, train_args = argv[:split], argv[split + 1 :]
    launcher = _Parser(prog="make train", add_help=True)
    launcher.add_argument("--nproc", default="2", help="worker processes (NPROC, default 2)")
    trainer = _Parser(prog="make train ARGS=...")
    add_override_arguments(trainer)
    try:
        options = launcher.parse_args(ours)
    except _UsageError as err:
        return f"make train: {err}"
    lines: list[str] = []
    try:
        nproc = int(options.nproc)
    except ValueError:
        nproc = 0
    if not 1 <= nproc <= MAX_NPROC:
        lines.append(
            f"  - NPROC (--nproc): got {options.nproc!r}; use a whole number of worker "
            f"processes from 1 to {MAX_NPROC} (e.g. NPROC=2)"
        )
    config: TrainConfig | None = None
    try:
        args, unknown = trainer.parse_known_args(train_args)
    except _UsageError as err:
        lines.append(f"  - {err} (see `make train ARGS=--help`)")
    else:
        if unknown:
            lines.append(
                f"  - unknown arguments: {' '.join(unknown)} (see `make train ARGS=--help`)"
            )
        paths = {field: getattr(args, f"set_{field}") for field in _PATH_FIELDS}
        try:
            config = from_namespace(args)
        except InvalidArgsError as err:
            lines += describe_problems(err).splitlines()[1:]
        else:  # the preset's own paths (defaults included) are known: check those
            paths = {field: getattr(config, field) for field in _PATH_FIELDS}
        bad_paths = path_problems({k: v for k, v in paths.items() if v})
        if bad_paths is not None:
            lines += describe_problems(bad_paths).splitlines()[1:]
    if config is not None and nproc >= 1 and nproc % config.tp:
        lines.append(
            f"  - --tp: got {config.tp}; use a divisor of NPROC ({nproc}): the workers are "
            "split into tensor-parallel groups of --tp"
        )
    if lines or config is None:
        count = len(lines)
        return "\n".join([f"make train: {count} problem{'s' * (count != 1)}:", *lines])
    named_data_dir = args.set_data_dir is not None and (
        Path(args.set_data_dir).resolve() != Path(DEFAULT_DATA_DIR).resolve()
    )
    if args.set_metrics_host is None:
        train_args = [*train_args, "--metrics-host", LOCAL_METRICS_HOST]
    return Launch(
        nproc,
        train_args,
        config,
        named_data_dir=named_data_dir,
        named_corpus=args.set_corpus is not None,
    )


def data_problem(launch: Launch) -> str | None:
    """Why the run's data directory cannot be trained on, or None: it holds no shards
    (the bundled corpus is tokenised only into the default directory, or into a
    missing or empty one named together with ``--corpus``: nothing is written into a
    folder the user did not name as the corpus's output), a shard does not match its
    manifest, or is truncated, of another vocabulary or smaller than one step."""
    config = launch.config
    data_dir = Path(config.data_dir)
    may_fill = not launch.named_data_dir or launch.named_corpus
    problem = data_dir_problem(data_dir, fill_from=config.corpus if may_fill else "")
    if problem is not None:
        if launch.named_data_dir:
            problem += "; or leave --data-dir out to train on the bundled corpus"
        return problem
    files = shard_files(data_dir, "train") if data_dir.is_dir() else []
    if not files:  # the trainer will tokenise the corpus into it
        reason = _writable_dir_problem(data_dir)
        return None if reason is None else f"the data directory {data_dir} {reason}"
    try:
        verify_dataset(data_dir)
        check_train_shards(
            files,
            ranks=launch.nproc // config.tp,  # a TP group reads one stream of batches
            batch=config.micro_batch_size,
            seq_len=config.seq_len,
            vocab_size=config.model.padded_vocab_size(config.pad_vocab),
        )
    except (ManifestError, ShardError) as err:
        return str(err)
    return None


def model_shapes(config: TrainConfig) -> dict[str, tuple[int, ...]]:
    """The shape of each of the run's model parameters, by name, from a model built on
    torch's meta device (no memory, no initialisation)."""
    import torch  # noqa: PLC0415 - only when there is a checkpoint to compare with

    from workloads.training.model import GPT  # noqa: PLC0415

    with torch.device("meta"):
        model = GPT(config.model, pad_vocab=config.pad_vocab)
    return {name: tuple(param.shape) for name, param in model.named_parameters()}


def checkpoint_problem(launch: Launch) -> str | None:
    """Why the run cannot resume the checkpoint it would resume, or None: every
    checkpoint is corrupt, or the newest readable one was written by the other engine,
    for another model shape, or (DeepSpeed) another world size or ZeRO stage. A corrupt
    newer checkpoint is no refusal: the run names it and resumes from the one before."""
    config = launch.config
    root = Path(config.ckpt_dir) if config.ckpt_dir else None
    if root is None or not root.is_dir() or not any(root.glob("step_*")):
        return None  # nothing to resume (and no torch import, which takes seconds)
    from workloads.training import checkpoint  # noqa: PLC0415 - torch

    try:
        point = checkpoint.resume_point(root)
    except checkpoint.CheckpointError as err:
        return str(err)
    if point is None:
        return None
    problem = checkpoint.engine_problem(point.path, config.engine)
    if problem is not None:
        return problem
    if config.engine == "deepspeed":
        from workloads.training import deepspeed_engine  # noqa: PLC0415

        saved = deepspeed_engine.read_marker(point.path)
        return deepspeed_engine.fit_problem(point.path, saved, launch.nproc, config.zero_stage)
    return checkpoint.shape_problem(point.path, model_shapes(config))


def preflight(launch: Launch) -> str | None:
    """The first reason the run would be refused after its workers started, found
    before: the data, then the checkpoint."""
    return data_problem(launch) or checkpoint_problem(launch)


class _Forwarder:
    """Passes the first SIGINT or SIGTERM this process receives to torchrun, once: a
    second would interrupt torchrun's own shutdown of its workers. Torchrun runs in a
    session of its own (as its workers do), so the terminal's Ctrl-C reaches it only
    through here."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self._previous = {
            sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
        }

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            if self.process is not None:
                self.process.send_signal(signum)

    def started(self, process: subprocess.Popen[bytes]) -> None:
        """Forward to ``process`` from now on (and a signal that came before it)."""
        self.process = process
        if self.received is not None:
            process.send_signal(self.received)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)


def run_workers(nproc: int, train_args: Sequence[str]) -> int:
    """Run torchrun with ``nproc`` workers, their stderr (and torchrun's) in a log file,
    and return the run's exit status, saying what happened in one message on stderr."""
    work = Path(tempfile.mkdtemp(prefix="make-train-"))
    log_path, report_path = work / "workers.log", work / "outcome.json"
    env = {**os.environ, outcome.REPORT_ENV: str(report_path)}
    sys.stdout.flush()
    forwarder = _Forwarder()
    try:
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                torchrun_argv(nproc, train_args), stderr=log, env=env, start_new_session=True
            )
            forwarder.started(process)
            status = process.wait()
    finally:
        forwarder.restore()
    result = outcome.read_report(report_path)
    if status == EXIT_OK:
        message = None
    elif result is not None and result.status == EXIT_USER_ERROR:
        status, message = EXIT_USER_ERROR, result.message
    elif result is not None and result.status in _STOPPED:
        status, message = result.status, None  # rank 0 said so on stdout
    elif forwarder.received is not None:
        name = signal.Signals(forwarder.received).name
        status, message = 128 + forwarder.received, f"make train: stopped by {name} before a step"
    else:
        message = f"make train: a training process failed (torchrun exit status {status})"
        status = EXIT_WORKER_FAILED
    if message is not None:
        print(message, file=sys.stderr)
    if status == EXIT_OK or status in _STOPPED:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"make train: the workers' and torchrun's errors are in {log_path}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    checked = check(sys.argv[1:] if argv is None else argv)
    if isinstance(checked, str):
        print(checked, file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        problem = preflight(checked)
    except KeyboardInterrupt:  # Ctrl-C while checking (importing torch): nothing started
        print("make train: interrupted; nothing was started", file=sys.stderr)
        return EXIT_INTERRUPTED
    if problem is not None:
        print(f"make train: {problem}", file=sys.stderr)
        return EXIT_USER_ERROR
    return run_workers(checked.nproc, checked.train_args)


if __name__ == "__main__":
    sys.exit(main())
