"""`GpuEnablement`: installs the GPU Operator and registers the configuration that `spec`
builds."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from modules.k8s.common import helm_release, register_namespace
from modules.k8s.gpu.spec import (
    GPU_OPERATOR_NS,
    gpu_configmaps,
    gpu_operator_network_policies,
    gpu_operator_values,
)
from modules.k8s.names import GPU_OPERATOR_NAMESPACE
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import GPU_OPERATOR


class GpuEnablement(pulumi.ComponentResource):
    """The GPU Operator and its configuration (only on stacks with GPU pools)."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:GpuEnablement", name, None, opts)
        provider = args.provider
        onprem = args.onprem
        configured = register_namespace(
            GPU_OPERATOR_NS.manifest(args.kubernetes_version),
            [*gpu_configmaps(args.pools), *gpu_operator_network_policies(args.network)],
            self,
            provider,
        )
        self.release = helm_release(
            "gpu-operator",
            GPU_OPERATOR,
            GPU_OPERATOR_NAMESPACE,
            values=gpu_operator_values(
                args.pools,
                install_driver=onprem.install_gpu_driver if onprem else False,
                install_toolkit=onprem.install_container_toolkit if onprem else False,
                scrape_interval_seconds=args.monitoring.scrape_interval_seconds,
            ),
            parent=self,
            provider=provider,
            # The ServiceMonitor CRD comes with the monitoring stack.
            depends_on=[*configured, *depends_on],
        )
        self.register_outputs({"chartVersion": GPU_OPERATOR.version})
