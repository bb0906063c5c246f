"""Running a make verb as a user would, with what a user gets wrong
(tests/test_user_errors.py).

`user_tree` makes a user's directory with what users have at hand: source text, a folder
of notes, a plain file, malformed JSON, a checkpoint whose ``.metadata`` is garbage, and
datasets whose manifest is broken, whose shard changed or which are too small. A case
runs one command (`run`) in a new session, so that a timeout ends its whole process tree
(torchrun's ranks, a JVM), with no AWS credentials and none of the caller's make
variables, and with the CPU seconds it and its children used (``os.wait4``). `tree_state`
is what a refusal may not change: every path under the user's directory, with its kind,
mode, size, modification time and content hash.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.environments import ROOT, VENVS
from workloads.data.manifest import MANIFEST, describe_shards, write_manifest
from workloads.data.shard_format import BYTE_VOCAB_SIZE, pack_header, shard_name

#: No credentials reach the commands: what needs an account must say so, not use one.
NO_CREDENTIALS = {
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}

#: What make would otherwise check, and install, before a verb's recipe: each
#: environment's venv and runtime lock, torch in two of them, and uv (Makefile,
#: "environments"). `-o` (assume old) leaves them as they are, so a case runs the
#: verb's own recipe only; `make test` has made them all before any test runs.
INSTALL_STAMPS = (
    ".venv-uv/bin/uv",
    *(f"{venv}/bin/python" for venv in VENVS.values()),
    *(f"{venv}/.installed-{env}" for env, venv in VENVS.items()),
    ".venv-training/.installed-torch",
    ".venv-lifecycle/.installed-torch",
    ".venv-llm/.installed-torch",
    ".venv-llm/.installed-llm-test",
    ".venv-finetune/.installed-torch",
)

#: What only an unhandled error prints: Python's traceback, torchrun's report of failed
#: ranks, a Java exception or its stack frames.
TRACEBACK = re.compile(
    r"Traceback \(most recent call last\)|ChildFailedError|Py4JJavaError|"
    r"Exception in thread|^\s+at [\w$.]+\(",
    re.MULTILINE,
)
#: Environment variables a message or a doc may name as ``NAME=`` (they are not make's).
ENVIRONMENT_VARIABLE = re.compile(r"^(AWS|MLFLOW|PULUMI|KUBE|NCCL|TORCH|OMP|FEAST|JAVA|UV|PIP|PG)")


def make_variables_read(makefile: str) -> set[str]:
    """The variables a Makefile reads: ``$(NAME)`` or ``$(origin NAME)`` anywhere in it."""
    return set(re.findall(r"\$\((?:origin\s+)?([A-Z][A-Z0-9_]*)\)", makefile))


#: make's own lines about a failed recipe (`exact` in the Makefile adds the second kind).
MAKE_LINE = re.compile(r"^make(\[\d+\])?: ")
#: ``make: *** [Makefile:318: serve] Error 2``: the recipe's (the command's) exit status.
MAKE_ERROR = re.compile(r"^make(?:\[\d+\])?: \*\*\* \[[^\]]*\] Error (\d+)", re.MULTILINE)


def make_command(words: list[str]) -> list[str]:
    """``make <verb> VAR=...`` as a user types it, without make's install checks."""
    assume = [arg for stamp in INSTALL_STAMPS for arg in ("-o", stamp)]
    return ["make", "--no-print-directory", *assume, *words]


def user_environment(scratch: Path) -> dict[str, str]:
    """A user's shell environment: PATH, a home and temporary directory of its own, no
    AWS credentials, no make variables (MAKEFLAGS, STACK, OUT, ... from the caller), one
    OpenMP thread (nothing here computes; idle threads would only spin)."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        **NO_CREDENTIALS,
    }


@dataclass(frozen=True)
class Outcome:
    """How a command ended.

    Args:
        status: the exit status of the command behind the verb (make's ``Error N``;
            0 when make succeeded; make's own status when no recipe failed).
        stdout: what it printed.
        stderr: what it printed on stderr.
        cpu_s: user and system CPU seconds of it and every child it waited for.
        wall_s: seconds until it ended.
        timed_out: it was killed after the time it was given.
    """

    status: int
    stdout: str
    stderr: str
    cpu_s: float
    wall_s: float
    timed_out: bool

    def message_lines(self) -> list[str]:
        """The command's lines on stderr: make's own left out, and argparse's usage
        summary above its one ``<prog>: error: ...`` line."""
        lines = [
            line for line in self.stderr.splitlines() if line.strip() and not MAKE_LINE.match(line)
        ]
        usage = next((i for i, line in enumerate(lines) if line.startswith("usage: ")), None)
        error = next((i for i, line in enumerate(lines) if ": error: " in line), None)
        if usage is not None and error is not None and usage < error:
            del lines[usage:error]
        return lines


def run(
    argv: list[str],
    *,
    env: Mapping[str, str],
    scratch: Path,
    timeout_s: float,
) -> Outcome:
    """Run ``argv`` from the repository root in a session of its own.

    Args:
        argv: the command.
        env: its whole environment.
        scratch: a directory for its output files.
        timeout_s: it and its session are killed (SIGKILL) after this many seconds.
    """
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    killed = threading.Event()

    def signal_group(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)

    def kill() -> None:
        killed.set()
        signal_group(signal.SIGKILL)

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    started = time.monotonic()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        timer.cancel()
    wall = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    signal_group(signal.SIGKILL)  # anything it left running (a server, a JVM)
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    failed = MAKE_ERROR.findall(stderr) if argv[0] == "make" else []
    return Outcome(
        status=int(failed[-1]) if failed else process.returncode,
        stdout=stdout,
        stderr=stderr,
        cpu_s=usage.ru_utime + usage.ru_stime,
        wall_s=wall,
        timed_out=killed.is_set(),
    )


# --- the user's files ---------------------------------------------------------------

TEXT = (
    "The falcon is the national bird of the United Arab Emirates. "
    "Dates, coffee and the sea were the old economy of the coast.\n"
)


def _write_shard(path: Path, tokens: int) -> None:
    """A byte-tokenizer shard of ``tokens`` tokens (the trainer's format)."""
    body = (TEXT.encode() * (tokens // len(TEXT) + 1))[:tokens]
    path.write_bytes(pack_header(tokens, BYTE_VOCAB_SIZE) + array("H", list(body)).tobytes())


def _dataset(path: Path, train_tokens: int, *, manifest: bool) -> None:
    path.mkdir(parents=True)
    _write_shard(path / shard_name("train", 0), train_tokens)
    _write_shard(path / shard_name("val", 0), 400)
    if manifest:
        write_manifest(path, {"name": path.name, "shards": describe_shards(path)})


def user_tree(home: Path) -> None:
    """The user's files (every case gets its own copy):

    - ``corpus/``: two source files (``.txt``, ``.jsonl``);
    - ``notes/``: a folder of the user's own text, no shards, no dataset;
    - ``no-sources/``: a folder without a ``.txt`` or ``.jsonl`` file;
    - ``afile``: a plain file, where a directory is expected;
    - ``bad.json``: malformed JSON; ``plan.json``: a plan of one resource, the stack;
    - ``corrupt-ckpt/step_000010/``: a checkpoint whose ``.metadata`` is garbage;
    - ``bad-export/``: a model directory whose model card is malformed;
    - ``data-bad-manifest/``: shards with a ``manifest.json`` that is not JSON;
    - ``data-changed/``: a dataset one of whose shards changed after its manifest;
    - ``data-small/``: shards too small for one step of the tiny preset.
    """
    (home / "corpus").mkdir(parents=True)
    (home / "corpus" / "a.txt").write_text(TEXT * 20)
    (home / "corpus" / "b.jsonl").write_text('{"text": "Abu Dhabi and Dubai."}\n' * 20)
    (home / "notes").mkdir()
    (home / "notes" / "todo.txt").write_text("buy milk\ncall Fatima\n")
    (home / "no-sources").mkdir()
    (home / "no-sources" / "readme.md").write_text("not a source file\n")
    (home / "afile").write_text("a file, not a directory\n")
    (home / "bad.json").write_text('{"steps": [ this is not json\n')
    stack = {"urn": "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev", "type": "pulumi:pulumi:Stack"}
    (home / "plan.json").write_text(json.dumps({"steps": [{"op": "create", "newState": stack}]}))
    step = home / "corrupt-ckpt" / "step_000010"
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"\x80\x04garbage, not a pickle")
    (step / "__0_0.distcp").write_bytes(b"\x00" * 64)
    (home / "bad-export").mkdir()
    (home / "bad-export" / "model_card.json").write_text("{ not json\n")
    (home / "bad-export" / "model.onnx").write_bytes(b"not onnx")
    (home / "bad-export" / "model.int8.onnx").write_bytes(b"not onnx")
    _dataset(home / "data-bad-manifest", 4000, manifest=False)
    (home / "data-bad-manifest" / MANIFEST).write_text("{ not json\n")
    _dataset(home / "data-changed", 4000, manifest=True)
    changed = home / "data-changed" / shard_name("train", 0)
    raw = bytearray(changed.read_bytes())
    raw[-2] ^= 0x01  # one token, same size: only the SHA-256 tells
    changed.write_bytes(bytes(raw))
    _dataset(home / "data-small", 100, manifest=False)


def tree_state(home: Path) -> dict[str, tuple[object, ...]]:
    """Every path under ``home`` (``home`` itself included) with what a change would
    alter: kind, mode, size, modification time and, for a file, its SHA-256."""
    state: dict[str, tuple[object, ...]] = {}
    for path in [home, *sorted(home.rglob("*"))]:
        info = path.lstat()
        digest = ""
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        key = str(path.relative_to(home)) if path != home else "."
        # A directory's mtime moves when an entry comes and goes: the entries are listed.
        mtime = info.st_mtime_ns if kind == "file" else 0
        state[key] = (kind, info.st_mode, info.st_size if kind == "file" else 0, mtime, digest)
    return state


def changes(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """What differs between two `tree_state` s: ``+path``, ``-path``, ``~path``."""
    added = [f"+{p}" for p in after if p not in before]
    removed = [f"-{p}" for p in before if p not in after]
    changed = [f"~{p}" for p in before if p in after and before[p] != after[p]]
    return added + removed + changed


# --- ports and a second run ----------------------------------------------------------


@contextlib.contextmanager
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 something listens on (the way an earlier server holds it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (a tracking server that is not running)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lock_path(out: Path) -> Path:
    """The lock a run of `make data` or `make export` holds beside its OUT while it
    writes there: ``<OUT>.lock`` (`workloads.output_lock`)."""
    return out.with_name(out.name + ".lock")


@contextlib.contextmanager
def held(out: Path) -> Iterator[None]:
    """OUT as a first run holds it while it runs: its lock file (`lock_path`) held with
    ``flock`` by a live process, this one, and naming it as the run's lock does."""
    path = lock_path(out)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": "", "command": "make"}
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(holder))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
