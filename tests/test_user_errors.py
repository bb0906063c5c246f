"""Every make verb, given what a user gets wrong, ends in one clear message on stderr and
the exit code the README's "Exit codes" table gives, prints no traceback, changes none
of the user's files, and refuses before it does the work (issue 30).

One row per case (`CASES`): the command as a user types it (``{home}`` is the user's
directory, `tests.support.user_errors.user_tree`; ``{busy}`` a port something listens on;
``{closed}`` one nothing listens on), the exit status of the command behind the verb
(make itself exits 2 and names it, "make: *** [...] Error N"), and a fragment of its
message. A row with ``held`` runs while that OUT is held by another run. The rows run in
parallel, each in a user directory of its own, before the first assertion.
"""

from __future__ import annotations

import os
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.environments import ROOT, VENVS, python
from tests.support.user_errors import (
    ENVIRONMENT_VARIABLE,
    TRACEBACK,
    Outcome,
    busy_port,
    changes,
    closed_port,
    held,
    make_command,
    make_variables_read,
    run,
    tree_state,
    user_environment,
    user_tree,
)

MAKEFILE = (ROOT / "Makefile").read_text()
README = (ROOT / "README.md").read_text()

#: A refusal comes before the work: more CPU than this (imports included) means the
#: command trained, ran Spark or planned before it looked at its input.
CPU_LIMIT_S = 30.0
#: ... and the wall clock it may take on a busy machine before it is killed.
TIMEOUT_S = 120.0
#: Lines on stderr: one message (a few, where it lists several problems), not a log.
MAX_LINES = 12

KINDS = (
    "arguments",
    "paths",
    "names",
    "ports",
    "URIs",
    "malformed files",
    "credentials",
    "held OUT",
)


@dataclass(frozen=True)
class Case:
    """One thing a user gets wrong.

    Args:
        id: the test id.
        kind: which of `KINDS` it is.
        command: as typed: ``make <verb> VAR=...``, or ``@<env> -m <module> ...`` for a
            command behind a verb that make gives no variable for (the README names them).
        code: the exit status the README's "Exit codes" table (or the command's own
            docstring) gives for it.
        says: a fragment of the message.
        held: an OUT (under ``{home}``) another run holds while this one runs.
        issue: the item of issue 30 it reproduces, if any.
    """

    id: str
    kind: str
    command: str
    code: int
    says: str
    held: str = ""
    issue: str = ""


# Training cases train at most one step of one process if the check they test is missing.
TRAIN = "make train NPROC=1 ARGS='--steps 1 --metrics-port 0 --log-every 1"
CASES = [
    # --- plan, cost, review, audit, bootstrap (plan environment) ----------------------
    Case("plan-unknown-stack", "names", "make plan STACK=nope", 2, "nope"),
    Case("plan-stack-with-a-slash", "names", "make plan STACK='a b/c'", 2, "a b/c"),
    Case("cost-unknown-stack", "names", "make cost STACK=nope", 2, "nope"),
    Case("review-unknown-stack", "names", "make review STACK=nope", 2, "nope"),
    Case("review-missing-plan", "paths", "make review PLAN={home}/missing.json", 2,
         "no such file"),
    Case("review-plan-is-a-folder", "paths", "make review PLAN={home}/notes", 2,
         "is a directory"),
    Case("review-malformed-plan", "malformed files", "make review PLAN={home}/bad.json", 2,
         "not valid JSON"),
    Case("review-malformed-pack-config", "malformed files",
         "make review PLAN={home}/plan.json PACK_CONFIG={home}/bad.json", 2, "bad.json"),
    Case("review-missing-rendered", "paths",
         "make review PLAN={home}/plan.json RENDERED={home}/missing", 2, "{home}/missing"),
    Case(
        "review-output-not-writable", "paths",
        "@plan -m policies.review --plan {home}/plan.json --out {home}/afile/review", 2,
        "cannot write reports",
    ),
    Case("audit-without-credentials", "credentials", "make audit REGIONS=me-central-1", 2,
         "no AWS credentials"),
    Case("audit-unknown-region", "arguments", "make audit REGIONS=mars-1", 2, "mars-1"),
    Case("audit-allowed-outside-the-uae", "arguments", "make audit ALLOWED=eu-west-1", 2,
         "not a UAE region"),
    Case("bootstrap-without-credentials", "credentials", "make bootstrap", 2,
         "no AWS credentials"),
    Case("bootstrap-region-outside-the-uae", "arguments",
         "make bootstrap ARGS='--region eu-west-1'", 2, "outside the UAE"),
    Case("bootstrap-malformed-role-arn", "arguments",
         "make bootstrap ARGS='--admin-role-arn admin'", 2, "not an IAM role ARN"),
    Case("prices-refresh-without-credentials", "credentials", "make prices-refresh", 2,
         "no AWS credentials"),
    Case("pin-images-without-credentials", "credentials", "make pin-images STACK=smb-cpu", 2,
         "no AWS credentials"),
    Case("pin-images-unknown-stack", "arguments", "make pin-images STACK=nowhere", 2,
         "no stack 'nowhere'"),
    Case("bench-review-malformed-sizes", "arguments", "make bench-review ARGS='--sizes a,b'", 2,
         "--sizes"),
    # --- training ---------------------------------------------------------------------
    Case("train-missing-data-dir", "paths", TRAIN + " --data-dir {home}/missing'", 2,
         "{home}/missing", issue="wrong 1"),
    Case("train-data-dir-of-raw-text", "paths", TRAIN + " --data-dir {home}/notes'", 2,
         "{home}/notes", issue="wrong 1"),
    Case("train-malformed-manifest", "malformed files",
         TRAIN + " --data-dir {home}/data-bad-manifest'", 2, "manifest.json", issue="wrong 2"),
    Case("train-changed-shard", "malformed files", TRAIN + " --data-dir {home}/data-changed'",
         2, "train_000000.bin changed", issue="wrong 2"),
    Case("train-too-small-dataset", "malformed files",
         TRAIN + " --data-dir {home}/data-small'", 2, "fewer than one step needs",
         issue="wrong 2"),
    Case("train-unknown-preset", "names", "make train PRESET=nope", 2, "nope"),
    Case("train-no-processes", "arguments", "make train NPROC=0", 2, "NPROC"),
    Case("train-unknown-argument", "arguments", "make train ARGS=--bogus", 2, "--bogus"),
    Case("train-checkpoint-dir-is-a-file", "paths", TRAIN + " --ckpt-dir {home}/afile'", 2,
         "{home}/afile"),
    Case("train-missing-corpus", "paths", TRAIN + " --corpus {home}/missing.txt'", 2,
         "{home}/missing.txt"),
    Case("train-privileged-metrics-port", "ports", "make train ARGS='--metrics-port 80'", 2,
         "metrics"),
    Case("train-tracking-uri-not-a-url", "URIs", TRAIN + " --tracking-uri not-a-url'", 2,
         "not-a-url"),
    Case("bench-no-steps", "arguments", "make bench ARGS='--steps 0'", 2, "--steps"),
    Case("profile-unknown-preset", "names", "make profile PRESET=nope", 2, "nope"),
    Case("gpu-check-unknown-argument", "arguments", "make gpu-check ARGS=--bogus", 2,
         "--bogus"),
    # --- data -------------------------------------------------------------------------
    Case("data-without-source", "arguments", "make data OUT={home}/ds", 2, "give SOURCE="),
    Case("data-without-out", "arguments", "make data SOURCE={home}/corpus", 2, "give OUT="),
    Case("data-missing-source", "paths", "make data SOURCE={home}/missing OUT={home}/ds", 2,
         "{home}/missing"),
    Case("data-source-without-text", "paths",
         "make data SOURCE={home}/no-sources OUT={home}/ds", 2, "{home}/no-sources"),
    Case("data-out-is-a-file", "paths", "make data SOURCE={home}/corpus OUT={home}/afile", 2,
         "is a file"),
    Case("data-out-under-a-file", "paths",
         "make data SOURCE={home}/corpus OUT={home}/afile/ds", 2, "{home}/afile"),
    Case("data-out-is-the-users-folder", "paths",
         "make data SOURCE={home}/corpus OUT={home}/notes", 2, "{home}/notes"),
    Case("data-out-held-by-another-run", "held OUT",
         "make data SOURCE={home}/corpus OUT={home}/busy", 2, "{home}/busy",
         held="{home}/busy", issue="wrong 5"),
    Case("data-s3-out-without-key", "URIs",
         "make data SOURCE={home}/corpus OUT=s3://bucket/datasets/x", 2, "--kms-key"),
    Case("data-event-log-not-s3", "URIs",
         "make data SOURCE={home}/corpus OUT={home}/ds ARGS='--event-log-uri not-a-uri'", 2,
         "not-a-uri"),
    Case("data-no-workers", "arguments",
         "make data SOURCE={home}/corpus OUT={home}/ds ARGS='--workers 0'", 2, "--workers"),
    Case("data-near-dup-out-of-range", "arguments",
         "make data SOURCE={home}/corpus OUT={home}/ds ARGS='--near-dup 2'", 2, "--near-dup"),
    Case("pii-eval-missing-sample", "paths",
         "make pii-eval ARGS='--sample {home}/missing.jsonl'", 2, "{home}/missing.jsonl"),
    Case("bench-data-workdir-is-the-users-folder", "paths",
         "make bench-data ARGS='--workdir {home}/notes --mb 0.01 --builder-python "
         "{home}/no-python'", 2, "{home}/notes"),
    Case("bench-data-builder-python-missing", "paths",
         "make bench-data ARGS='--workdir {home}/bench --mb 0.01 --builder-python "
         "{home}/no-python'", 2, "{home}/no-python"),
    # --- distill, prune, bench-smaller (smaller models for CPUs) -------------------------
    Case("distill-without-teacher", "arguments", "make distill OUT={home}/student", 2,
         "give TEACHER="),
    Case("distill-missing-teacher", "paths",
         "make distill TEACHER={home}/missing OUT={home}/student", 2, "{home}/missing"),
    Case("distill-corrupt-teacher", "malformed files",
         "make distill TEACHER={home}/corrupt-ckpt OUT={home}/student", 2, ".metadata"),
    Case("prune-without-checkpoint", "arguments", "make prune OUT={home}/pruned HEADS=1", 2,
         "give CKPT="),
    Case("prune-corrupt-checkpoint", "malformed files",
         "make prune CKPT={home}/corrupt-ckpt OUT={home}/pruned HEADS=0.5", 2, ".metadata"),
    Case("bench-smaller-no-steps", "arguments", "make bench-smaller ARGS='--teacher-steps 0'",
         2, "steps"),
    # --- export, track, register, promote, bench-infer (lifecycle) ----------------------
    Case("export-without-checkpoint", "arguments", "make export", 2, "give CHECKPOINT="),
    Case("export-hf-without-checkpoint", "arguments", "make export-hf", 2, "give CKPT="),
    Case("export-hf-missing-checkpoint", "paths",
         "make export-hf CKPT={home}/missing OUT={home}/hf", 2, "{home}/missing"),
    Case("export-hf-corrupt-metadata", "malformed files",
         "make export-hf CKPT={home}/corrupt-ckpt OUT={home}/hf", 2, ".metadata"),
    Case("export-corrupt-metadata", "malformed files",
         "make export CHECKPOINT={home}/corrupt-ckpt OUT={home}/export", 2, ".metadata",
         issue="wrong 4"),
    Case("export-out-is-the-users-folder", "paths",
         "make export CHECKPOINT={home}/corrupt-ckpt OUT={home}/notes", 2, "{home}/notes"),
    Case("export-out-held-by-another-run", "held OUT",
         "make export CHECKPOINT={home}/corrupt-ckpt OUT={home}/busy", 2, "{home}/busy",
         held="{home}/busy", issue="wrong 5"),
    Case("export-unknown-argument", "arguments",
         "make export CHECKPOINT={home}/corrupt-ckpt ARGS=--bogus", 2, "--bogus"),
    Case("track-port-not-a-number", "ports", "make track TRACK_PORT=abc", 2, "'abc'"),
    Case("track-privileged-port", "ports", "make track TRACK_PORT=80", 2, "1024-65535"),
    Case("track-busy-port", "ports", "make track TRACK_PORT={busy}", 2, "already in use"),
    Case("register-without-run", "arguments",
         "make register TRACKING_URI=http://127.0.0.1:{closed}", 2, "RUN="),
    Case("register-tracking-uri-not-a-url", "URIs",
         "make register RUN=0123abcd TRACKING_URI=not-a-url", 2, "not-a-url", issue="wrong 6"),
    Case("register-no-tracking-server", "URIs",
         "make register RUN=0123abcd TRACKING_URI=http://127.0.0.1:{closed}", 2,
         "cannot reach the tracking server"),
    Case("promote-without-name", "arguments",
         "make promote TRACKING_URI=http://127.0.0.1:{closed}", 2, "NAME="),
    Case("promote-tracking-uri-not-a-url", "URIs",
         "make promote NAME=tiny TRACKING_URI=not-a-url", 2, "not-a-url"),
    Case("rollback-no-tracking-server", "URIs",
         "make rollback NAME=tiny TRACKING_URI=http://127.0.0.1:{closed}", 2,
         "cannot reach the tracking server"),
    Case("promote-unknown-runtime", "arguments",
         "make promote NAME=tiny TRACKING_URI=http://127.0.0.1:{closed} ARGS='--runtime tpu'",
         2, "tpu"),
    Case("bench-infer-unknown-preset", "names", "make bench-infer ARGS='--presets nope'", 2,
         "nope"),
    # --- serve, bench-serve (serving) ---------------------------------------------------
    Case("serve-without-model", "arguments", "make serve", 2, "give MODEL="),
    Case("serve-folder-that-is-no-export", "paths", "make serve MODEL={home}/notes", 2,
         "{home}/notes"),
    Case("serve-malformed-model-card", "malformed files", "make serve MODEL={home}/bad-export",
         2, "model_card.json"),
    Case("serve-port-not-a-number", "ports", "make serve MODEL={home}/notes PORT=abc", 2,
         "'abc'"),
    Case("serve-same-ports", "ports",
         "make serve MODEL={home}/notes PORT=18090 GRPC_PORT=18090", 2, "18090"),
    Case("bench-serve-without-model", "arguments", "make bench-serve", 2, "give MODEL="),
    Case("bench-serve-folder-that-is-no-export", "paths", "make bench-serve MODEL={home}/notes",
         2, "{home}/notes"),
    # --- serve-llm, bench-llm (llm) ------------------------------------------------------
    Case("serve-llm-without-model", "arguments", "make serve-llm", 2, "give MODEL="),
    Case("serve-llm-hub-address", "names", "make serve-llm MODEL=hf://org/model", 2,
         "hub address"),
    Case("serve-llm-folder-that-is-no-model", "paths", "make serve-llm MODEL={home}/notes", 2,
         "{home}/notes"),
    Case("bench-llm-without-model", "arguments", "make bench-llm", 2, "give MODEL="),
    # --- features, bench-features (features) --------------------------------------------
    Case("features-no-customers", "arguments",
         "make features WORKDIR={home}/fs ARGS='--customers 0'", 2, "--customers",
         issue="wrong 7"),
    Case("features-busy-port", "ports", "make features WORKDIR={home}/fs PORT={busy}", 2,
         "{busy}", issue="wrong 8"),
    Case("features-port-not-a-number", "ports", "make features WORKDIR={home}/fs PORT=abc",
         2, "'abc'"),
    Case("features-dir-is-the-users-folder", "paths", "make features WORKDIR={home}/notes",
         2, "was not made by this command", issue="wrong 9"),
    Case("features-dir-is-a-file", "paths", "make features WORKDIR={home}/afile", 2,
         "is a file", issue="wrong 9"),
    Case("features-tracking-uri-not-a-url", "URIs",
         "make features WORKDIR={home}/fs TRACKING_URI=htp:/nowhere", 2, "htp:/nowhere"),
    Case("bench-features-before-features", "paths",
         "make bench-features WORKDIR={home}/fs", 2, "run `make features`"),
    # --- pipeline (pipelines) -----------------------------------------------------------
    Case("pipeline-without-source", "arguments", "make pipeline", 2, "give SOURCE="),
    Case("pipeline-missing-source", "paths",
         "make pipeline SOURCE={home}/missing TRACKING_URI=http://127.0.0.1:{closed}", 2,
         "does not exist"),
    Case("pipeline-model-name-with-a-slash", "names",
         "make pipeline SOURCE={home}/corpus NAME='a b/c' "
         "TRACKING_URI=http://127.0.0.1:{closed}", 2, "a b/c", issue="wrong 8"),
    Case("pipeline-unknown-preset", "names",
         "make pipeline SOURCE={home}/corpus PRESET=nope TRACKING_URI=http://127.0.0.1:{closed}",
         2, "nope"),
    Case("pipeline-no-processes", "arguments",
         "make pipeline SOURCE={home}/corpus NPROC=0 TRACKING_URI=http://127.0.0.1:{closed}", 2,
         "--nproc"),
    Case("pipeline-tracking-uri-not-a-url", "URIs",
         "make pipeline SOURCE={home}/corpus TRACKING_URI=not-a-url", 2, "not-a-url"),
    Case("pipeline-no-tracking-server", "URIs",
         "make pipeline SOURCE={home}/corpus TRACKING_URI=http://127.0.0.1:{closed}", 2,
         "cannot reach the tracking server"),
    # --- finetune (finetune), register-finetune (lifecycle) -----------------------------
    Case("finetune-without-base", "arguments", "make finetune DATA={home}/corpus OUT={home}/ft",
         2, "give BASE="),
    Case("finetune-base-is-no-model", "paths",
         "make finetune BASE={home}/notes DATA={home}/corpus/b.jsonl OUT={home}/ft", 2,
         "has no config.json"),
    Case("register-finetune-without-out", "arguments",
         "make register-finetune TRACKING_URI=http://127.0.0.1:{closed}", 2, "give OUT="),
    Case("register-finetune-out-is-no-finetune", "paths",
         "make register-finetune OUT={home}/notes TRACKING_URI=http://127.0.0.1:{closed}", 2,
         "is not a fine-tuning output"),
    Case("register-finetune-bad-name", "names",
         "make register-finetune OUT={home}/notes NAME='a b/c' "
         "TRACKING_URI=http://127.0.0.1:{closed}", 2, "a b/c"),
    Case("register-finetune-tracking-uri-not-a-url", "URIs",
         "make register-finetune OUT={home}/notes TRACKING_URI=not-a-url", 2, "not-a-url"),
]  # fmt: skip

#: Verbs that take nothing a user can get wrong (no variable, no file, no port), or whose
#: input is the repository itself, with the reason they have no case.
NO_USER_INPUT = {
    "help": "lists the verbs",
    "setup": "installs the environments",
    "print-environments": "prints the Makefile's lists",
    "plan-all": "plans the shipped stacks; `make plan` has the cases",
    "review-all": "reviews the shipped stacks; `make review` has the cases",
    "lint": "ruff over the tree",
    "typecheck": "mypy over the tree",
    "test": "this suite",
    "lock": "needs PyPI; rewrites locks/",
    "clean": "removes build/",
    "gpu-wheels": "downloads two pinned wheels",
    "pipeline-ir": "compiles the committed pipeline",
    "checkov": "scans the shipped plans (installs checkov from PyPI)",
}


def verbs() -> list[str]:
    """The verbs `make help` lists (a ``## `` comment on the rule's line)."""
    return re.findall(r"^([a-z][a-z-]*):[^\n]*## ", MAKEFILE, flags=re.MULTILINE)


def recipe_modules(verb: str) -> list[str]:
    """The Python modules a verb's recipe runs (``-m module``)."""
    match = re.search(
        rf"^{re.escape(verb)}:[^\n]*\n((?:\t[^\n]*\n)*)", MAKEFILE, flags=re.MULTILINE
    )
    assert match, f"no rule for {verb!r} in the Makefile"
    return re.findall(r"-m ([\w.]+)", match[1])


def behind(case: Case) -> list[str]:
    """The modules of the commands behind a case's verb."""
    words = shlex.split(case.command)
    return [words[2]] if words[0].startswith("@") else recipe_modules(words[1])


def documented_codes() -> dict[str, set[int]]:
    """The README's "Exit codes" table: each command's module and the codes it gives."""
    section = README[README.index("## Exit codes") :]
    section = section[: section.index("\n## ", 1)]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = [line for line in lines[start:] if line.startswith("|")]
    # One table: a row after the prose below it would be rendered as text, not a row.
    assert lines[start : start + len(table)] == table, "a README exit-code row is outside the table"
    header, _, *rows = table
    codes = [int(cell) for cell in header.strip("|").split("|")[1:]]
    found: dict[str, set[int]] = {}
    for row in rows:
        command, *cells = [cell.strip() for cell in row.strip("|").split("|")]
        module = re.search(r"-m ([\w.]+)", command)
        assert module, f"README exit-code row names no `-m module`: {command}"
        found[module[1]] = {code for code, cell in zip(codes, cells, strict=True) if cell}
    return found


# --- running the cases ----------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """A case's outcome, the values of its placeholders (``home``, the ports) and what
    it changed in the user's directory."""

    outcome: Outcome
    values: dict[str, str]
    changed: list[str]


def run_case(case: Case, base: Path, ports: dict[str, int]) -> Result:
    home, scratch = base / "home", base / "scratch"
    scratch.mkdir(parents=True)
    user_tree(home)
    values = {"home": str(home), **{name: str(port) for name, port in ports.items()}}
    words = shlex.split(case.command.format(**values))
    if words[0].startswith("@"):
        argv = [str(python(words[0][1:])), *words[1:]]
    else:
        argv = make_command(words[1:])
    with ExitStack() as stack:
        if case.held:
            stack.enter_context(held(Path(case.held.format(**values))))
        before = tree_state(home)
        outcome = run(argv, env=user_environment(scratch), scratch=scratch, timeout_s=TIMEOUT_S)
        return Result(outcome, values, changes(before, tree_state(home)))


@pytest.fixture(scope="module")
def results(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Result]:
    """Every selected case's result, the cases run in parallel (subprocesses)."""
    for venv in sorted(set(VENVS.values())):
        if not (ROOT / venv / "bin" / "python").exists():
            pytest.fail(f"these cases need {venv}; `make setup` creates every environment")
    selected = {
        item.callspec.id  # the case's id (`ids=` below)
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_a_user_error_is_one_clear_message"
        and hasattr(item, "callspec")
    }
    cases = [case for case in CASES if case.id in selected]
    with busy_port() as busy:
        ports = {"busy": busy, "closed": closed_port()}
        with ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 2) as pool:
            futures = {
                case.id: pool.submit(run_case, case, tmp_path_factory.mktemp(case.id), ports)
                for case in cases
            }
            done = {name: future.result() for name, future in futures.items()}
    cpu = sum(result.outcome.cpu_s for result in done.values())
    costly = sorted(done.items(), key=lambda item: -item[1].outcome.cpu_s)[:5]
    print(
        f"\nuser errors: {len(done)} cases, {cpu:.1f} s CPU; most: "
        + ", ".join(f"{name} {result.outcome.cpu_s:.1f} s" for name, result in costly)
    )
    return done


def problems(case: Case, result: Result) -> list[str]:
    """Everything that is wrong with how the command ended, each in a line."""
    found = []
    out = result.outcome
    says = case.says.format(**result.values)
    if out.timed_out:
        found.append(f"it was still running after {TIMEOUT_S:.0f} s and was killed")
    if out.status == 0:
        found.append("it exited 0")
    elif out.status != case.code:
        found.append(f"it exited {out.status}; the README gives {case.code} for this")
    if TRACEBACK.search(out.stdout + out.stderr):
        found.append("it printed a traceback")
    lines = out.message_lines()
    if not any(says in line for line in lines):
        found.append(f"its message does not say {says!r}")
    if len(lines) > MAX_LINES:
        found.append(f"it printed {len(lines)} lines on stderr, not one message")
    if result.changed:
        found.append(f"it changed the user's files: {' '.join(result.changed[:8])}")
    if out.cpu_s > CPU_LIMIT_S:
        found.append(f"it used {out.cpu_s:.0f} s of CPU before it stopped (did it work first?)")
    read = make_variables_read(MAKEFILE)
    for name in re.findall(r"\b([A-Z][A-Z0-9_]*)=", "\n".join(lines)):
        if name not in read and not ENVIRONMENT_VARIABLE.match(name):
            found.append(f"its message names {name}=, a variable make does not read")
    return found


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_user_error_is_one_clear_message(case: Case, results: dict[str, Result]) -> None:
    result = results[case.id]
    found = problems(case, result)
    assert not found, (
        f"{case.command}\n  - " + "\n  - ".join(found)
        + f"\n--- stderr ---\n{result.outcome.stderr[-3000:]}"
        + f"\n--- stdout ---\n{result.outcome.stdout[-1500:]}"
    )  # fmt: skip


def test_every_verb_a_user_can_get_wrong_has_cases() -> None:
    covered = {shlex.split(case.command)[1] for case in CASES if case.command.startswith("make")}
    missing = [verb for verb in verbs() if verb not in covered and verb not in NO_USER_INPUT]
    assert not missing, f"verbs without a user-error case: {missing}"
    assert not set(NO_USER_INPUT) - set(verbs()), "NO_USER_INPUT names a verb make lacks"


def test_every_kind_of_bad_input_has_cases() -> None:
    assert {case.kind for case in CASES} == set(KINDS)
    assert len({case.id for case in CASES}) == len(CASES), "two cases share an id"


def test_the_codes_are_the_readmes() -> None:
    """Each case's command behind its verb is in the README's "Exit codes" table, and
    the table gives that code for it."""
    table = documented_codes()
    wrong: dict[str, list[str]] = {}
    for case in CASES:
        modules = behind(case)
        documented = [module for module in modules if module in table]
        if not documented:
            wrong.setdefault(f"{' / '.join(modules)} is not in the table", []).append(case.id)
        elif not any(case.code in table[module] for module in documented):
            problem = f"the table gives no {case.code} for {' / '.join(documented)}"
            wrong.setdefault(problem, []).append(case.id)
    assert not wrong, "README, Exit codes:\n" + "\n".join(
        f"{problem} (cases {', '.join(ids)})" for problem, ids in sorted(wrong.items())
    )
