"""What the workload layers' AWS parts (serving, the feature store, pipelines, Spark) take
from the foundation, and the two things each of them makes there: an ECR repository for
its images and an EKS Pod Identity role per identity that reads or writes the data."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pulumi

from modules.aws.storage import ImageRegistry, ImageRegistryArgs
from modules.aws.workload_identity import PodIdentityRole, PodIdentityRoleArgs


@dataclass(frozen=True)
class WorkloadAws:
    """The foundation's outputs a workload layer's AWS part uses.

    Args:
        name: the stack's name prefix (repositories are ``<name>/<image>``).
        account_id: the stack's account.
        region: the stack's region.
        cluster_name: the EKS cluster the Pod Identity associations are made in.
        bucket_arn: the data bucket.
        bucket_name: its name.
        storage_key_arn: the CMK the data and the images are encrypted with.
        opts: the options every resource is created with (the region's provider).
    """

    name: str
    account_id: str
    region: str
    cluster_name: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    bucket_name: pulumi.Input[str]
    storage_key_arn: pulumi.Input[str]
    opts: pulumi.ResourceOptions

    @property
    def registry(self) -> str:
        """The prefix the stack's images are pulled from: ``<ecr>/<name>``."""
        return f"{self.account_id}.dkr.ecr.{self.region}.amazonaws.com/{self.name}"

    def repository(self, resource_name: str, image: str) -> ImageRegistry:
        """The ECR repository ``<name>/<image>``, encrypted with the storage key."""
        return ImageRegistry(
            resource_name,
            ImageRegistryArgs(
                repository_name=f"{self.name}/{image}", storage_key_arn=self.storage_key_arn
            ),
            self.opts,
        )

    def mirror(self, repositories: Iterable[str]) -> None:
        """One ECR repository (`repository`) per image path under the stack's registry,
        for images mirrored from upstream (resource ``registry-<path with dashes>``)."""
        for path in repositories:
            self.repository(f"registry-{path.replace('/', '-')}", path)

    def pod_role(
        self,
        resource_name: str,
        *,
        namespace: str,
        service_account: str,
        description: str,
        policy: pulumi.Input[str],
    ) -> PodIdentityRole:
        """A role only ``service_account`` in ``namespace`` can assume, with ``policy``
        as its only permissions."""
        return PodIdentityRole(
            resource_name,
            PodIdentityRoleArgs(
                cluster_name=self.cluster_name,
                namespace=namespace,
                service_account=service_account,
                description=description,
                policy=policy,
            ),
            self.opts,
        )
