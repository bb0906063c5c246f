"""The Horovod example the MPI runtime runs.

Always: the image, the SSH configuration and the MPI runtime agree (port, key paths,
user home, the program's path in the image, the pinned Horovod commit), and a usage
error exits with 2 before Horovod is imported. Where Horovod and Open MPI are installed
(the Horovod image, or a venv with Horovod built as docs/workloads.md says): two ranks
under ``mpirun`` on CPU pass the all-reduce check, train, and write the checkpoint.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modules.k8s.trainer.runtimes import (
    SSH_AUTH_MOUNT_PATH,
    SSHD_PORT,
    default_horovod_program,
)
from workloads.horovod import train

ROOT = Path(__file__).resolve().parents[2]
HOROVOD = ROOT / "workloads" / "horovod"


def config(name: str) -> dict[str, str]:
    """``Key value`` lines of an OpenSSH config file (comments dropped)."""
    found = {}
    for raw in (HOROVOD / name).read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and " " in line:
            key, value = line.split(None, 1)
            found[key] = value
    return found


def test_sshd_and_ssh_use_the_runtimes_port_and_the_mounted_keys() -> None:
    sshd = config("sshd_config_trainer")
    assert sshd["Port"] == str(SSHD_PORT)
    assert sshd["HostKey"] == f"{SSH_AUTH_MOUNT_PATH}/id_rsa"
    assert sshd["AuthorizedKeysFile"] == f"{SSH_AUTH_MOUNT_PATH}/authorized_keys"
    assert sshd["PasswordAuthentication"] == "no" and sshd["PermitRootLogin"] == "no"
    ssh = config("ssh_config")
    assert ssh["Port"] == str(SSHD_PORT)
    assert ssh["IdentityFile"] == f"{SSH_AUTH_MOUNT_PATH}/id_rsa"


def test_the_image_holds_what_the_runtime_runs() -> None:
    dockerfile = (HOROVOD / "Dockerfile").read_text(encoding="utf-8")
    # The worker's sshd -f <file> and the launcher's program are where the image puts them.
    assert "COPY workloads/horovod/sshd_config_trainer /etc/ssh/sshd_config_trainer" in dockerfile
    assert "COPY workloads/horovod/ /app/workloads/horovod/" in dockerfile
    python, program, *_ = default_horovod_program()
    assert python == "/opt/venv/bin/python"
    assert (ROOT / program.removeprefix("/app/")).is_file()
    # The user the pods run as has its home where Trainer mounts the keys.
    home = str(Path(SSH_AUTH_MOUNT_PATH).parent)
    assert f"usermod --home {home} --shell /bin/bash trainer" in dockerfile
    assert "USER 1000:1000" in dockerfile
    # Horovod is built from a pinned commit (0.28.1 does not build against PyTorch 2.1+).
    assert re.search(r"^ARG HOROVOD_COMMIT=[0-9a-f]{40}$", dockerfile, re.M)
    assert "HOROVOD_WITH_MPI=1" in dockerfile and "HOROVOD_GPU_OPERATIONS=NCCL" in dockerfile


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--lr", "-1"], ["--nope"]])
def test_a_usage_error_exits_2_before_horovod(argv: list[str]) -> None:
    assert train.main(argv) == train.EXIT_USAGE


HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None and shutil.which("mpirun")


@pytest.mark.skipif(not HAVE_HOROVOD, reason="needs Horovod and Open MPI (the Horovod image)")
def test_two_ranks_under_mpirun_train_and_checkpoint(tmp_path: Path) -> None:
    command = [
        "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
        sys.executable, str(HOROVOD / "train.py"),
        "--steps", "40", "--log-every", "10", f"--ckpt-dir={tmp_path}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "horovod: 2 ranks, all-reduce check OK, device cpu" in done.stdout
    losses = [float(x) for x in re.findall(r"step \d+/40 loss ([0-9.]+)", done.stdout)]
    assert len(losses) == 4 and losses[-1] < losses[0] / 2, losses
    import torch  # noqa: PLC0415 - only here, where the run wrote it

    saved = torch.load(tmp_path / "horovod-final.pt", weights_only=True)
    assert saved["steps"] == 40
