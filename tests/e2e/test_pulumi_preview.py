"""Opt-in end to end: `pulumi preview` of a stack, with the policy pack, against a local
moto server. Runs only where the Pulumi CLI (and its aws/kubernetes plugins) is
installed; on machines without it (like the one this package is developed on) it is
skipped and has not been run, which the skip reason says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("pulumi") is None, reason="needs the Pulumi CLI, which is not installed"
    ),
]


def test_preview_of_uae_dev_with_the_policy_pack(tmp_path: Path) -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {
            **os.environ,
            "PULUMI_BACKEND_URL": f"file://{tmp_path}",
            "PULUMI_CONFIG_PASSPHRASE": "e2e-only",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "me-central-1",
        }

        def pulumi(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["pulumi", *args, "--non-interactive"],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False,
            )  # fmt: skip

        assert pulumi("stack", "init", "uae-dev").returncode == 0
        preview = pulumi("preview", "--stack", "uae-dev", "--policy-pack", "policies", "--json")
        assert preview.returncode == 0, preview.stderr[-4000:]
        document = json.loads(preview.stdout)
        types = {s["newState"]["type"] for s in document["steps"] if "newState" in s}
        assert "aws:eks/cluster:Cluster" in types
    finally:
        server.stop()
