"""Every shell command the README shows is either run here, offline, exactly as written
(and must succeed, or fail with the exit code the README promises), or listed below with
the reason it cannot run offline. A command added to the README without a line here
fails `test_every_readme_command_is_classified`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.user_errors import ENVIRONMENT_VARIABLE, NO_CREDENTIALS, make_variables_read
from tests.test_environments import ENVIRONMENTS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The README and the guides: their `make` commands and variables must be the Makefile's.
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: Commands that need what this machine and CI do not have, by the command's start.
NOT_OFFLINE: dict[str, str] = {
    "make test": "is the suite this test runs in",
    "pulumi ": "needs the Pulumi CLI and a UAE state backend",
    "aws ": "needs an AWS account",
    "make bootstrap": "changes an AWS account (its dry run is run below)",
    "make audit": "reads a live AWS account (tested against moto in tests/policies)",
    ".venv/bin/python -m policies.audit": "reads a live AWS account (tested against moto)",
    "make review PLAN=file.json": "file.json stands for the user's own plan",
    # The walkthroughs "From a checkpoint to a served model" and "Tracked, registered and
    # promoted" run in their own tests below.
    "make train ARGS=": "the walkthroughs (test_the_walkthrough_serves_a_model, ...)",
    "make track TRACK_PORT=5001": "the tracked walkthrough (test_the_tracked_walkthrough_...)",
    "make register RUN=<run id> TRACK_PORT=5001": "the tracked walkthrough",
    "make promote NAME=tiny TRACK_PORT=5001": "the tracked walkthrough",
    "make export CHECKPOINT=build/demo/": "the walkthrough",
    "make serve MODEL=build/export/demo": "the walkthrough",
    "curl -s -X POST http://127.0.0.1:8080/": "the walkthrough",
    "make train": "a 2-process training run, tested in tests/workloads",
    "make bench": "minutes of benchmarking; its figures are in BENCHMARKS.md",
    "make profile": "a profiled training run, tested in tests/workloads/test_profile.py",
    "make prices-refresh": "reads AWS's Pricing API (needs credentials)",
    "make pin-images": "reads the stack's ECR (needs credentials); tests/stacks/test_image_lock.py",
    ".venv/bin/python -m stacks.pin_images": "reads the stack's ECR (needs credentials)",
    ".venv/bin/python -m stacks.bootstrap": "changes an AWS account",
    ".venv-training/bin/python -m workloads.training.gpu_check": "needs an NVIDIA GPU (dry run)",
    "make track": "a long-running server, tested in tests/workloads",
    "make serve": "a long-running server, tested in tests/serving",
    "curl ": "talks to a running `make serve`, tested in tests/serving",
    "make register": "needs a tracked run, tested in tests/workloads",
    "make promote": "needs a registered model on a tracking server, tested in tests/workloads",
    "make rollback": "needs a registered model on a tracking server, tested in tests/workloads",
    "make export": "needs a checkpoint, tested in tests/workloads",
    "make lock": "needs PyPI and rewrites locks/",
    "make pii-eval": "a minute of PII scanning; its figures are in docs/data.md",
    "make checkov": "installs checkov from PyPI; an independent scan, not part of make test",
    "make gpu-check": "needs an NVIDIA GPU (its dry run is tested in tests/workloads)",
    "make features": "installs .venv-features from PyPI; run by tests/features/test_serving.py",
    "make bench-features": "minutes of benchmarking after make features; figures in BENCHMARKS.md",
}

#: Run although a NOT_OFFLINE prefix matches them: they touch nothing outside.
RUN_ANYWAY = {"make bootstrap ARGS=--dry-run"}

#: Commands run as written, with the exit code the README promises (default 0).
EXPECTED_EXIT: dict[str, int] = {}


def readme_commands() -> list[str]:
    """Commands of the README's ```sh blocks (continuation lines joined, comments and
    blank lines dropped) and its inline `make ...` / `.venv*/bin/python ...` commands
    that name no placeholder (`<stack>`), each once, in order."""
    text = README.read_text()
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = line.split(" #", 1)[0].strip() if not line.startswith("#") else ""
            if command:
                commands.append(command)
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    for span in re.findall(r"`((?:make|\.venv[\w-]*/bin/python) [^`]*)`", prose):
        if "<" not in span and "..." not in span:
            commands.append(span.strip())
    return list(dict.fromkeys(commands))


def offline(command: str) -> bool:
    if command in RUN_ANYWAY:
        return True
    return not any(command.startswith(prefix) for prefix in NOT_OFFLINE)


def test_every_readme_command_is_classified() -> None:
    for command in readme_commands():
        words = shlex.split(command)
        assert words, command
        if offline(command):
            assert words[0] == "make" or re.fullmatch(r"\.venv[\w-]*/bin/python", words[0]), (
                f"README command {command!r}: run it here (make or .venv*/bin/python) or "
                "add it to NOT_OFFLINE with the reason"
            )


OFFLINE_COMMANDS = [c for c in readme_commands() if offline(c)]


def make_dry_run(command: str) -> str:
    """What make would run for a `make` command (``make -n``), environment rules left
    out; "" for a command that is not make's."""
    words = shlex.split(command)
    if words[0] != "make":
        return ""
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", *words[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def same_as_an_earlier_command(command: str) -> str:
    """The earlier README command that makes exactly the same commands run as `command`
    (`make review` and `make review STACK=uae-prod`: uae-prod is the default), or ""."""
    dry = make_dry_run(command)
    if not dry:
        return ""
    for earlier in OFFLINE_COMMANDS[: OFFLINE_COMMANDS.index(command)]:
        if EXPECTED_EXIT.get(earlier, 0) == EXPECTED_EXIT.get(command, 0) and (
            make_dry_run(earlier) == dry
        ):
            return earlier
    return ""


@pytest.mark.parametrize("command", OFFLINE_COMMANDS)
def test_readme_command_runs_as_documented(command: str) -> None:
    earlier = same_as_an_earlier_command(command)
    if earlier:
        # Runs exactly what `earlier` ran (make -n says so), which its own case runs.
        assert earlier in OFFLINE_COMMANDS
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | NO_CREDENTIALS
    result = subprocess.run(
        command,
        shell=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    expected = EXPECTED_EXIT.get(command, 0)
    assert result.returncode == expected, (
        f"{command!r} exited {result.returncode}, the README says {expected}:\n"
        f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


WALKTHROUGH = "## From a checkpoint to a served model"


def walkthrough_commands(heading: str = WALKTHROUGH) -> list[str]:
    """The commands of the README's walkthrough section under ``heading``, in order."""
    text = README.read_text()
    section = text[text.index(heading) :]
    section = section[: section.index("\n## ", 1)]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            command = line.split("  #", 1)[0].strip()
            if command:
                commands.append(command)
    return commands


def run_as_written(command: str) -> str:
    """Run a README command from the repository root; its stdout, or a failed test."""
    result = subprocess.run(
        command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stdout + result.stderr


def serving(command: str, *, seconds: int) -> subprocess.Popen[bytes]:
    """A README command that serves until stopped (Ctrl-C), started in a session of its
    own (the test stops the whole of it) and killed after ``seconds`` in any case."""
    return subprocess.Popen(
        ["timeout", str(seconds), *shlex.split(command)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.mark.slow
def test_the_walkthrough_serves_a_model() -> None:
    """Train, export, serve and the exact curl request, as the README shows them."""
    train, export, serve, curl = walkthrough_commands()
    assert serve.startswith("make serve") and curl.startswith("curl ")
    shutil.rmtree(ROOT / "build" / "demo", ignore_errors=True)
    for command in (train, export):
        run_as_written(command)
    server = serving(serve, seconds=300)
    try:
        deadline = time.monotonic() + 240
        answer = None
        while time.monotonic() < deadline and server.poll() is None:
            result = subprocess.run(
                curl, shell=True, capture_output=True, text=True, timeout=60, check=False
            )
            if result.returncode == 0 and result.stdout.startswith("{"):
                answer = json.loads(result.stdout)
                break
            time.sleep(2)
        assert answer is not None, "make serve did not answer the README's request"
        assert answer["model_name"] == "demo-int8"
        (output,) = answer["outputs"]
        assert output["name"] == "text" and output["datatype"] == "BYTES"
        assert len(output["data"]) == 1 and output["data"][0]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


TRACKED = "## Tracked, registered and promoted"


@pytest.mark.slow
def test_the_tracked_walkthrough_runs_as_written() -> None:
    """The second walkthrough as the README shows it, after the first: a tracking server
    (its first command, left running), then each command in order, a `<... run id>`
    replaced by the id the training before it printed (its `View run` line, as the
    README says), every one exiting 0. A checkpoint folder of its own (not the first
    walkthrough's) that an earlier run of it left is removed first, as in a fresh clone.
    """
    track, *commands = walkthrough_commands(TRACKED)
    assert track.startswith("make track") and any(c.startswith("make promote") for c in commands)
    first_walkthrough = set(re.findall(r"--ckpt-dir (\S+)", walkthrough_commands()[0]))
    for folder in re.findall(r"--ckpt-dir (\S+)", " ".join(commands)):
        if folder not in first_walkthrough:
            shutil.rmtree(ROOT / folder, ignore_errors=True)
    # The README's port: a server already there (another checkout's) is not this one's.
    port = int(re.findall(r"TRACK_PORT=(\d+)", track)[0])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is taken: stop that server"
    server = serving(track, seconds=900)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, f"{track} exited {server.returncode}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"{track} did not answer /health"
            time.sleep(1)
        run_id = ""
        for written in commands:
            placeholder = re.compile(r"<[^>]*run id>")
            assert run_id or not placeholder.search(written), f"{written}: no run id before it"
            command = placeholder.sub(run_id, written)
            assert "<" not in command, f"{written}: a placeholder the test cannot fill"
            said = run_as_written(command)
            if command.startswith("make train"):
                ids = re.findall(r"runs/([0-9a-f]{32})", said)
                assert ids, f"{command} printed no `View run` line: no run was tracked"
                run_id = ids[-1]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


# --- the docs and the Makefile agree on variable names (issue 30, item 5) -------------

#: ``make <verb> VAR=value ...``: the verb and its assignments (values may be quoted).
MAKE_ASSIGNMENTS = re.compile(
    r"\bmake ([a-z][a-z-]*)((?:[ \t]+[A-Z][A-Z0-9_]*=(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s`'\"]*))+)"
)


def documented_make_variables() -> dict[str, set[str]]:
    """Each verb and the variables the docs give it in a ``make <verb> VAR=...``."""
    found: dict[str, set[str]] = {}
    for doc in DOCS:
        for verb, assignments in MAKE_ASSIGNMENTS.findall(doc.read_text()):
            unquoted = re.sub(r"(['\"]).*?\1", "", assignments)
            names = re.findall(r"(?:^|\s)([A-Z][A-Z0-9_]*)=", unquoted)
            found.setdefault(verb, set()).update(names)
    return found


def test_the_docs_give_each_verb_variables_it_reads() -> None:
    """Every ``make <verb> VAR=...`` in the README and docs/ names a variable that verb's
    commands read: make runs it (``make -n``) with a marker for each, and every marker
    must reach the commands. A variable make ignores would be ignored silently."""
    documented = documented_make_variables()
    assert {"data", "train", "register", "serve"} <= documented.keys()  # the parser works
    ignored = []
    for verb, names in sorted(documented.items()):
        markers = {name: f"doc-marker-{name.lower()}" for name in sorted(names)}
        result = subprocess.run(
            ["make", "-n", "--no-print-directory", verb]
            + [f"{name}={marker}" for name, marker in markers.items()],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"make -n {verb}: {result.stderr[-2000:]}"
        ignored += [f"make {verb} {name}=" for name, m in markers.items() if m not in result.stdout]
    assert not ignored, f"the docs give variables these verbs do not read: {ignored}"


def test_the_docs_name_only_variables_make_reads() -> None:
    """A ``NAME=`` the docs name in a paragraph about a make verb (``naming
    `WORKDIR=` ``) is one the Makefile reads, or an environment variable."""
    read = make_variables_read((ROOT / "Makefile").read_text())
    unread = []
    for doc in DOCS:
        for paragraph in re.split(r"\n\s*\n", doc.read_text()):
            if not re.search(r"\bmake [a-z]", paragraph):
                continue
            unread += [
                f"{doc.relative_to(ROOT)}: {name}="
                for name in re.findall(r"`([A-Z][A-Z0-9_]*)=", paragraph)
                if name not in read and not ENVIRONMENT_VARIABLE.match(name)
            ]
    assert not unread, f"the docs name variables the Makefile does not read: {unread}"


def test_the_docs_run_each_module_in_its_own_environment() -> None:
    """``.venv-<env>/bin/python -m <module>`` in the README and docs/ names the
    environment whose code holds the module (the Makefile's CODE_<env>): another
    environment lacks its image's packages."""

    def venv_of(module: str) -> str:
        """The venv whose code holds ``module`` ("" for one that is not the project's)."""
        path = Path(*module.split("."))
        for file in (path.with_suffix(".py"), path / "__main__.py"):
            for named in ENVIRONMENTS.values():
                if any(file == Path(p) or Path(p) in file.parents for p in named["code"]):
                    return named["venv"][0]
        return ""

    wrong = [
        f"{doc.relative_to(ROOT)}: {venv}/bin/python -m {module} (its code is {venv_of(module)}'s)"
        for doc in DOCS
        for venv, module in re.findall(r"(\.venv[\w-]*)/bin/python -m ([\w.]+)", doc.read_text())
        if venv_of(module) not in ("", venv)
    ]
    assert not wrong, f"the docs run these modules in another environment's Python: {wrong}"
