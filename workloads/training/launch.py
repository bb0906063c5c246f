"""`make train`: check the training config once, then start torchrun.

Started straight under torchrun, a bad preset, a bad argument or a checkpoint path that
is a file is reported by every rank, and torchrun adds its own traceback of the failed
workers. This launcher parses and validates the command line with the workloads' typed
config (`workloads.training.config`) and checks the paths the run will write, in one process,
before any worker exists; only a config that passes is handed to torchrun
(``python -m torch.distributed.run``, the same as the ``torchrun`` script), which
replaces this process, so its exit status is the run's.

Usage: ``python -m workloads.training.launch [--nproc N] -- [--preset tiny] [--steps 60] ...``
(everything after ``--`` is passed to ``python -m workloads.train``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from modules.validation import Checker, InvalidArgsError
from workloads.training.config import add_override_arguments, describe_problems, from_namespace

EXIT_USER_ERROR = 2  # as workloads.train
_PATH_FIELDS = ("ckpt_dir", "data_dir", "log_jsonl", "corpus")
#: More worker processes than this on one node is a typo, not a machine.
MAX_NPROC = 256


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting, so every problem of the
    command line is reported in the launcher's one message."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


class _UsageError(Exception):
    pass


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
    ``corpus``: empty or absent for unset), checked before any process starts."""
    check = Checker()
    for field in ("ckpt_dir", "data_dir"):
        value = paths.get(field)
        if value:
            reason = _writable_dir_problem(Path(value))
            check.require(reason is None, field, value, reason or "")
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


def check(argv: Sequence[str]) -> tuple[int, list[str]] | str:
    """The worker count and training arguments of a valid command line, or the one
    message that says what to fix."""
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
    if lines:
        count = len(lines)
        return "\n".join([f"make train: {count} problem{'s' * (count != 1)}:", *lines])
    return nproc, train_args


def main(argv: Sequence[str] | None = None) -> int:
    checked = check(sys.argv[1:] if argv is None else argv)
    if isinstance(checked, str):
        print(checked, file=sys.stderr)
        return EXIT_USER_ERROR
    nproc, train_args = checked
    command = torchrun_argv(nproc, train_args)
    sys.stdout.flush()
    os.execv(command[0], command)  # torchrun's exit status becomes this command's


if __name__ == "__main__":
    sys.exit(main())
