"""The Horovod example the MPI runtime runs.

The image, the SSH configuration and the MPI runtime agree (port, key paths, user home,
the program's path in the image, the pinned Horovod commit). The program itself is
tested in the training environment (tests/workloads/test_horovod_program.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from modules.k8s.names import TRAINER_GID, TRAINER_UID
from modules.k8s.trainer.runtimes import (
    SSH_AUTH_MOUNT_PATH,
    SSHD_PORT,
    default_horovod_program,
)

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
    # ...and is the user the runtime's pods run as (sshd refuses keys owned by another).
    uid = f"{TRAINER_UID}:{TRAINER_GID}"
    assert f"USER {uid}" in dockerfile and f"chown -R {uid} {home}" in dockerfile
    # Horovod is built from a pinned commit (0.28.1 does not build against PyTorch 2.1+).
    assert re.search(r"^ARG HOROVOD_COMMIT=[0-9a-f]{40}$", dockerfile, re.M)
    assert "HOROVOD_WITH_MPI=1" in dockerfile and "HOROVOD_GPU_OPERATIONS=NCCL" in dockerfile
