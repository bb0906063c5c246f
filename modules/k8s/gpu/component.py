"""`GpuEnablement`: installs the GPU Operator and registers the configuration that `spec`
builds."""

from __future__ import annotations

from modules.component_base import Outputs
from modules.k8s.gpu.spec import (
    GPU_OPERATOR_NS,
    gpu_configmaps,
    gpu_operator_network_policies,
    gpu_operator_values,
)
from modules.k8s.names import GPU_OPERATOR_NAMESPACE
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import GPU_OPERATOR


class GpuEnablement(PlatformService):
    """The GPU Operator and its configuration (only on stacks with GPU pools)."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        configured = self.fenced_namespace(
            GPU_OPERATOR_NS,
            [*gpu_configmaps(args.pools), *gpu_operator_network_policies(args.network)],
        )
        onprem = args.onprem
        values = gpu_operator_values(
            args.pools,
            install_driver=onprem.install_gpu_driver if onprem else False,
            install_toolkit=onprem.install_container_toolkit if onprem else False,
            scrape_interval_seconds=args.monitoring.scrape_interval_seconds,
            cc_pools=args.confidential_computing_pools,
            registry=args.addon_registry,
        )
        # The ServiceMonitor CRD comes with the monitoring stack (``waits_for``).
        self.release = self.install(
            "gpu-operator",
            GPU_OPERATOR,
            GPU_OPERATOR_NAMESPACE,
            values,
            [*configured, *self.waits_for],
        )
        return {"chartVersion": GPU_OPERATOR.version}
