"""NCCL/libfabric environment per fabric, overrides, and the start-up log."""

from __future__ import annotations

import pytest

from workloads.training.fabric import describe_env, fabric_env, supports_gpudirect_rdma


def test_efa_forces_the_libfabric_plugin_and_gpudirect() -> None:
    env = fabric_env("efa")
    assert env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["NCCL_NET"] == "AWS Libfabric"  # no silent socket fallback
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker,veth"
    assert "NCCL_PROTO" not in env  # only aws-ofi-nccl <= 1.5 needed Simple
    assert fabric_env("efa", gpudirect_rdma=False)["FI_EFA_USE_DEVICE_RDMA"] == "0"


def test_infiniband_names_hcas_and_bootstrap_interface() -> None:
    env = fabric_env("infiniband", ib_hca="mlx5_0,mlx5_1", socket_ifname="=bond0", ib_gid_index=3)
    assert env["NCCL_NET"] == "IB" and env["NCCL_IB_DISABLE"] == "0"
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert env["NCCL_SOCKET_IFNAME"] == "=bond0"
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_IB_GID_INDEX" not in fabric_env("infiniband")
    assert not any(k.startswith("FI_") for k in env)


def test_none_is_plain_tcp_on_purpose() -> None:
    env = fabric_env("none")
    assert env["NCCL_NET"] == "Socket" and env["NCCL_IB_DISABLE"] == "1"


def test_overrides_replace_add_and_remove() -> None:
    env = fabric_env(
        "efa",
        debug=True,
        overrides={"NCCL_BUFFSIZE": "4194304", "NCCL_NET": "", "NCCL_ALGO": "Ring"},
    )
    assert env["NCCL_BUFFSIZE"] == "4194304" and env["NCCL_ALGO"] == "Ring"
    assert "NCCL_NET" not in env
    assert env["NCCL_DEBUG"] == "INFO"
    with pytest.raises(ValueError, match="not an environment variable name"):
        fabric_env("efa", overrides={"BAD-NAME": "1"})
    with pytest.raises(ValueError, match="fabric must be one of"):
        fabric_env("roce")


def test_gpudirect_rdma_instance_families() -> None:
    assert supports_gpudirect_rdma("p5en.48xlarge")
    assert supports_gpudirect_rdma("p4d.24xlarge")
    assert not supports_gpudirect_rdma("g5.48xlarge")
    assert not supports_gpudirect_rdma(None)


def test_start_log_warns_when_sockets_could_be_used_silently() -> None:
    lines = describe_env({"NCCL_DEBUG": "WARN", "PATH": "/bin"}, multi_node=True, cuda=True)
    assert "fabric env: NCCL_DEBUG=WARN" in lines
    assert not any("PATH" in line for line in lines)
    assert any("WARNING: NCCL_NET is not set" in line for line in lines)
    quiet = describe_env(fabric_env("efa"), multi_node=True, cuda=True)
    assert not any("WARNING" in line for line in quiet)
    assert any("FI_PROVIDER=efa" in line for line in quiet)
