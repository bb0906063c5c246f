"""`Tenancy`: registers each team's namespace, the objects that fence it in (`spec`), its
checkpoint volume (`modules.k8s.storage.spec`) and the cluster CA its pods verify the
platform's endpoints with (`modules.k8s.pki.spec.ca_bundle`)."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from modules.k8s.common import register
from modules.k8s.names import team_namespace
from modules.k8s.pki.spec import ca_bundle
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.storage.spec import checkpoint_volume_manifests
from modules.k8s.tenancy.spec import team_manifests, team_namespace_manifest


class Tenancy(pulumi.ComponentResource):
    """The team namespaces and everything that fences them in."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        storage_ready: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
        pki_ready: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("gpuplatform:k8s:Tenancy", name, None, opts)
        self.namespaces: dict[str, pulumi.Resource] = {}
        self.team_objects: dict[str, list[pulumi.Resource]] = {}
        for team in args.teams:
            ns = register(
                team_namespace_manifest(team, args.kubernetes_version), self, args.provider
            )
            self.namespaces[team.name] = ns
            objects: list[pulumi.Resource] = [
                register(manifest, self, args.provider, depends_on=[ns])
                for manifest in team_manifests(team, args)
            ]
            objects.append(
                register(
                    ca_bundle(team_namespace(team.name)),
                    self,
                    args.provider,
                    depends_on=[ns, *pki_ready],
                )
            )
            objects += [
                register(
                    manifest,
                    self,
                    args.provider,
                    depends_on=[ns, *storage_ready],
                    # Checkpoints are data: the claim stays unless unprotected on purpose.
                    protect=manifest["kind"] == "PersistentVolumeClaim",
                )
                for manifest in checkpoint_volume_manifests(team, args)
            ]
            self.team_objects[team.name] = objects
        self.register_outputs({"namespaces": {t: team_namespace(t) for t in self.namespaces}})
