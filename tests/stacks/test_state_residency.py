"""A stack whose state backend or secrets provider is not in the UAE is refused before
any resource is registered, with the stack file line and the bootstrap's fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pulumi.runtime
import pytest
from pulumi.runtime.sync_await import _sync_await

from stacks import state_residency
from stacks.offline_plan import PlanError, load_stack_file, plan_registrations
from stacks.state_residency import (
    Located,
    StateResidency,
    backend_region,
    discover_backend,
    read_secrets_provider,
    secrets_provider_region,
)

UAE_BACKEND = "s3://uae-gpu-platform-state-123456789012-me-central-1?region=me-central-1"
UAE_SECRETS = "awskms://alias/uae-gpu-platform-secrets?region=me-central-1"
REPO = Path(__file__).resolve().parents[2]


def stack_file(tmp_path: Path, line: str | None) -> Path:
    path = tmp_path / "Pulumi.test.yaml"
    head = f"# a stack\n{line}\n" if line else "# a stack\n"
    path.write_text(head + "config:\n  uae-gpu-platform:target: aws\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("url", "region"),
    [
        (UAE_SECRETS, "me-central-1"),
        ("awskms://alias/k?region=eu-west-1", "eu-west-1"),
        ("awskms:///arn:aws:kms:me-central-1:123456789012:key/abc", "me-central-1"),
        ("awskms://arn:aws:kms:eu-west-1:123456789012:alias/k", "eu-west-1"),
        # a region parameter contradicting the key ARN: no region can be trusted
        ("awskms://arn:aws:kms:me-central-1:123456789012:key/abc?region=eu-west-1", None),
        ("awskms://alias/k", None),
        ("passphrase", None),
        ("gcpkms://projects/p/locations/me-central2/keyRings/r/cryptoKeys/k", None),
    ],
)
def test_secrets_provider_region(url: str, region: str | None) -> None:
    assert secrets_provider_region(url) == region


def test_backend_region() -> None:
    assert backend_region(UAE_BACKEND) == "me-central-1"
    assert backend_region("s3://b?region=eu-west-1&awssdk=v2") == "eu-west-1"
    assert backend_region("s3://b") is None
    assert backend_region("https://api.pulumi.com") is None
    assert backend_region("file://~") is None


def test_uae_backend_and_secrets_provider_pass(tmp_path: Path) -> None:
    secrets = read_secrets_provider(stack_file(tmp_path, f"secretsprovider: {UAE_SECRETS}"))
    assert secrets.source.endswith("Pulumi.test.yaml:2")
    state = StateResidency("test", Located(UAE_BACKEND, "--backend", "me-central-1"), secrets)
    assert state.problems() == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("secretsprovider: awskms://alias/k?region=eu-west-1", "is in eu-west-1"),
        ("secretsprovider: passphrase", "with no UAE region"),
        ("secretsprovider: default", "with no UAE region"),
        (None, "has no `secretsprovider:` line"),
    ],
)
def test_foreign_passphrase_or_missing_secrets_provider_is_refused(
    tmp_path: Path, line: str | None, expected: str
) -> None:
    secrets = read_secrets_provider(stack_file(tmp_path, line))
    state = StateResidency("test", Located(UAE_BACKEND, "--backend", "me-central-1"), secrets)
    (problem,) = state.problems()
    assert expected in problem
    assert "Pulumi.test.yaml" in problem
    if line:
        assert "Pulumi.test.yaml:2" in problem  # the stack file line
    assert "make bootstrap" in problem and "awskms://alias/uae-gpu-platform-secrets" in problem


@pytest.mark.parametrize(
    "backend",
    ["s3://state?region=eu-west-1", "s3://state", "https://api.pulumi.com", "file://~"],
)
def test_foreign_backend_is_refused(tmp_path: Path, backend: str) -> None:
    secrets = read_secrets_provider(stack_file(tmp_path, f"secretsprovider: {UAE_SECRETS}"))
    state = StateResidency("test", Located(backend, "PULUMI_BACKEND_URL", None), secrets)
    (problem,) = state.problems()
    assert backend in problem and "PULUMI_BACKEND_URL" in problem
    assert "pulumi login 's3://uae-gpu-platform-state-<account-id>-me-central-1" in problem


def test_backend_is_resolved_in_the_clis_order(tmp_path: Path) -> None:
    project = tmp_path / "Pulumi.yaml"
    project.write_text("name: p\n", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    (home / "credentials.json").write_text(json.dumps({"current": UAE_BACKEND}), "utf-8")
    env = {"PULUMI_HOME": str(home)}
    assert discover_backend(env, project).url == UAE_BACKEND
    project.write_text("name: p\nbackend:\n  url: s3://proj?region=me-central-1\n", "utf-8")
    assert discover_backend(env, project).url == "s3://proj?region=me-central-1"
    env["PULUMI_BACKEND_URL"] = "s3://env?region=eu-west-1"
    found = discover_backend(env, project)
    assert (found.url, found.source, found.region) == (
        "s3://env?region=eu-west-1",
        "PULUMI_BACKEND_URL",
        "eu-west-1",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = discover_backend({"PULUMI_HOME": str(empty)}, tmp_path / "none.yaml")
    assert missing.url is None
    assert StateResidency("s", missing, Located(UAE_SECRETS, "f", "me-central-1")).problems()


class CountingMocks(pulumi.runtime.Mocks):
    """Records every resource the program asks the engine to create."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.created.append(args.typ)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        self.created.append(f"call {args.token}")
        return {}


def test_the_program_refuses_before_any_resource() -> None:
    from stacks.program import main  # noqa: PLC0415 - loaded under the mocks

    config, secret_keys = load_stack_file("uae-dev")
    foreign = state_residency.for_offline_plan("uae-dev", "s3://state?region=eu-west-1")
    mocks = CountingMocks()
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="uae-gpu-platform", stack="uae-dev", preview=True)
    pulumi.runtime.set_all_config(dict(config), secret_keys)
    with pytest.raises(pulumi.RunError) as err:
        _sync_await(pulumi.runtime.stack.run_pulumi_func(lambda: main(foreign)))
    assert "would keep its state or secrets outside the UAE" in str(err.value)
    assert mocks.created == []
    # The same program with the UAE backend registers the platform.
    uae = state_residency.for_offline_plan("uae-dev", UAE_BACKEND)
    with pytest.raises(PlanError):
        plan_registrations("uae-dev", config, secret_keys, foreign)
    assert plan_registrations("uae-dev", config, secret_keys, uae)


def test_shipped_stacks_carry_the_bootstraps_secrets_provider() -> None:
    for stack in ("uae-prod", "uae-dev", "smb-cpu", "onprem-ib"):
        found = read_secrets_provider(state_residency.stack_file(stack))
        assert found.url == UAE_SECRETS, stack


def test_make_plan_with_a_foreign_backend_is_one_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stacks.offline_plan", "--out", str(tmp_path), "--backend",
         "s3://state?region=eu-west-1", "smb-cpu"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "state backend 's3://state?region=eu-west-1' (from --backend) is in eu-west-1" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "smb-cpu.json").exists()
