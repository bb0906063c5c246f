"""NCCL / libfabric environment for the fabric between nodes.

`fabric_env` is a pure function from the fabric (``efa``, ``infiniband``, ``none``) to
the environment the training containers get; the deployment sets it and a user can
override any variable. `describe_env` is logged at start by every node, so a job that
silently fell back to TCP sockets is visible in its first lines.

Why each variable (EFA, aws-ofi-nccl 1.x as shipped in the EFA installer >= 1.38):

- ``FI_PROVIDER=efa``: libfabric uses the EFA provider, never TCP.
- ``FI_EFA_USE_DEVICE_RDMA=1``: GPUDirect RDMA on instances that support it (p4d,
  p5, p5e, p5en, p6); off elsewhere (``gpudirect_rdma=False``).
- ``FI_EFA_FORK_SAFE=1``: data-loader worker forks must not corrupt registered memory.
- ``NCCL_NET=AWS Libfabric``: NCCL must use the aws-ofi-nccl plugin; if the plugin
  or the EFA devices are missing, NCCL fails at start instead of quietly using
  sockets. The plugin answers to this name in every 1.x release (it renamed itself
  "Libfabric" in 1.12 but still accepts the old name).
- ``NCCL_SOCKET_IFNAME=^lo,docker,veth``: NCCL's bootstrap (not data) traffic uses the
  pod's primary interface, never loopback or bridge devices.
- ``NCCL_BUFFSIZE=8388608`` and ``NCCL_P2P_NET_CHUNKSIZE=524288``: AWS's tuning for
  P5-class instances (awsome-distributed-training).
- No ``NCCL_PROTO``: forcing ``Simple`` was needed only up to aws-ofi-nccl 1.5; the
  plugin now guards the protocols itself (aws-ofi-nccl#280, awsome-distributed-ai#86).

InfiniBand (on premises): ``NCCL_NET=IB`` (no socket fallback), ``NCCL_IB_HCA`` the
HCAs to use (default ``mlx5``: every ConnectX port), ``NCCL_SOCKET_IFNAME`` the
bootstrap interface, ``NCCL_IB_GID_INDEX`` only for RoCE fabrics (usually 3).

None: ``NCCL_NET=Socket`` and ``NCCL_IB_DISABLE=1``: plain TCP, on purpose.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

Fabric = Literal["efa", "infiniband", "none"]
FABRICS: tuple[str, ...] = ("efa", "infiniband", "none")

BOOTSTRAP_EXCLUDE = "^lo,docker,veth"
EFA_NCCL_NET = "AWS Libfabric"
#: Instance families whose EFA supports GPUDirect RDMA.
GPUDIRECT_RDMA_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LOGGED_PREFIXES = ("NCCL_", "FI_", "OFI_NCCL_", "GLOO_", "TORCH_NCCL_")


def supports_gpudirect_rdma(instance_type: str | None) -> bool:
    """Whether an EC2 instance type's EFA can write straight into GPU memory."""
    if not instance_type:
        return False
    family = instance_type.split(".", 1)[0]
    return family in GPUDIRECT_RDMA_FAMILIES or family.startswith("p6")


def fabric_env(
    fabric: str,
    *,
    gpudirect_rdma: bool = True,
    socket_ifname: str = BOOTSTRAP_EXCLUDE,
    ib_hca: str = "mlx5",
    ib_gid_index: int | None = None,
    debug: bool = False,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment for ``fabric``, with ``overrides`` applied last.

    Args:
        fabric: ``efa``, ``infiniband`` or ``none``.
        gpudirect_rdma: EFA only: the instance supports GPUDirect RDMA.
        socket_ifname: NCCL's bootstrap interface selector.
        ib_hca: InfiniBand only: ``NCCL_IB_HCA`` (device names or prefixes).
        ib_gid_index: InfiniBand only: RoCE GID index, ``None`` for native IB.
        debug: ``NCCL_DEBUG=INFO`` (transport selection in the logs) instead of WARN.
        overrides: variables that replace or add to the result; an empty value
            removes the variable.
    """
    if fabric not in FABRICS:
        raise ValueError(f"fabric must be one of {', '.join(FABRICS)}, got {fabric!r}")
    env: dict[str, str] = {
        "NCCL_DEBUG": "INFO" if debug else "WARN",
        "NCCL_SOCKET_IFNAME": socket_ifname,
    }
    if debug:
        env["NCCL_DEBUG_SUBSYS"] = "INIT,NET,ENV"
    if fabric == "efa":
        env |= {
            "FI_PROVIDER": "efa",
            "FI_EFA_USE_DEVICE_RDMA": "1" if gpudirect_rdma else "0",
            "FI_EFA_FORK_SAFE": "1",
            "NCCL_NET": EFA_NCCL_NET,
            "NCCL_BUFFSIZE": "8388608",
            "NCCL_P2P_NET_CHUNKSIZE": "524288",
        }
    elif fabric == "infiniband":
        env |= {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": ib_hca}
        if ib_gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(ib_gid_index)
    else:
        env |= {"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1"}
    for name, value in (overrides or {}).items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"fabric override {name!r} is not an environment variable name")
        if value == "":
            env.pop(name, None)
        else:
            env[name] = value
    return env


def describe_env(environ: Mapping[str, str], *, multi_node: bool, cuda: bool) -> list[str]:
    """Log lines of the fabric variables in effect, and a warning where the job can
    fall back to sockets without failing."""
    lines = [
        f"fabric env: {name}={environ[name]}"
        for name in sorted(environ)
        if name.startswith(_LOGGED_PREFIXES)
    ]
    if not lines:
        lines.append("fabric env: no NCCL_/FI_ variables set (NCCL picks its transport itself)")
    if multi_node and cuda and "NCCL_NET" not in environ:
        lines.append(
            "fabric WARNING: NCCL_NET is not set on a multi-node job: if the EFA/IB plugin "
            "fails to load NCCL silently uses TCP sockets; set NCCL_NET "
            "(workloads.training.fabric) and NCCL_DEBUG=INFO to see the transport"
        )
    if environ.get("NCCL_NET") == "Socket" and multi_node and cuda:
        lines.append("fabric NOTE: NCCL_NET=Socket: inter-node traffic goes over TCP on purpose")
    return lines


# Minimum all-reduce bus bandwidth in GB/s (10^9 bytes/s, as nccl-tests reports it)
# for a multi-node run using every GPU of each node, with 1 GiB+ messages.
#
# Why these numbers: across nodes a ring all-reduce is limited by each node's
# network, so busbw approaches the instance's aggregate EFA line rate in GB/s
# (p5/p5e/p5en/p6: 3200 Gbit/s = 400 GB/s; p4d/p4de: 400 Gbit/s = 50 GB/s). The
# threshold is half the line rate: a healthy EFA fabric measures well above it, while
# the failures this job exists to catch (NCCL on TCP sockets over the ENA interface,
# EFA devices missing from the pod, GPUDirect RDMA off) land far below it (sockets
# give a few GB/s). It is a pass/fail gate, not a performance target.
MIN_BUSBW_GBPS: dict[str, float] = {
    "p4d.24xlarge": 25.0,
    "p4de.24xlarge": 25.0,
    "p5.48xlarge": 200.0,
    "p5e.48xlarge": 200.0,
    "p5en.48xlarge": 200.0,
    "p6-b200.48xlarge": 200.0,
}
