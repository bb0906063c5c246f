"""`Storage`: registers the storage classes, the FSx CSI driver and the team directories
that `spec` builds (EKS; on premises the classes exist already)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from modules.component_base import Outputs
from modules.k8s.names import KUBE_SYSTEM
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.storage.spec import (
    STORAGE_NS,
    ebs_storage_classes,
    fsx_csi_values,
    fsx_root_volume,
    platform_storage_class,
    storage_network_policies,
    team_directories_job,
)
from modules.k8s.versions import FSX_CSI_DRIVER


@dataclass
class StorageResources:
    """What other components wait for: the classes, and the FSx team directories."""

    classes: list[pulumi.Resource]
    team_directories: list[pulumi.Resource]


class Storage(PlatformService):
    """Storage classes, the FSx CSI driver and the shared file system's team directories."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        self.ready = StorageResources(classes=[], team_directories=[])
        if args.eks is None:
            # On premises the classes exist already; they are named in config.
            return {"platformStorageClass": platform_storage_class(args)}
        self.ready.classes = [
            self.add(m) for m in ebs_storage_classes(args.eks.storage_kms_key_arn)
        ]
        fsx = args.eks.fsx
        if fsx is not None:
            driver = self.install(
                "aws-fsx-csi-driver",
                FSX_CSI_DRIVER,
                KUBE_SYSTEM,
                fsx_csi_values(args.eks.registry),
            )
            # The root volume and the fences, then the Job that makes the team directories.
            _, *root = self.fenced_namespace(
                STORAGE_NS, [*fsx_root_volume(fsx), *storage_network_policies(args.network)]
            )
            job = self.add(
                team_directories_job([t.name for t in args.teams], fsx.init_image),
                [driver, *root],
            )
            self.ready.team_directories = [job]
        return {"platformStorageClass": platform_storage_class(args)}
