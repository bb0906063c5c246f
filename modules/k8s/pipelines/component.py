"""`KubeflowPipelines`: registers what `manifests` and `loop` build.

Thin on purpose: every object comes from a pure function (tested against upstream's
manifests, the Kubernetes schemas and the CRDs); this file only wraps the secrets,
resolves the outputs (the bucket, the database host) into the few strings that contain
them, and orders the objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.component_base import KubernetesComponent, Outputs
from modules.k8s.common import Manifest, register
from modules.k8s.pipelines import loop
from modules.k8s.pipelines import manifests as kfp
from modules.k8s.pipelines.spec import (
    DATABASE_USER,
    NAMESPACE,
    PipelinesPlacement,
    PipelinesSpec,
    pipeline_root,
)


@dataclass(frozen=True)
class PipelinesArgs:
    """Args of `KubeflowPipelines`.

    Args:
        provider: the cluster's Kubernetes provider; every object uses it explicitly.
        spec: the validated settings.
        placement: where KFP's state and images are (`PipelinesPlacement`).
        kubernetes_version: the cluster's minor version (Pod Security labels).
        database_password: KFP's database role's password (secret config
            ``pipelinesDatabasePassword``).
        object_store_keys: on premises the site store's access key id and secret key
            (secret config values); None on AWS (Pod Identity).
        pipeline: the compiled ``data-to-model`` (`loop.read_pipeline`), or None while
            it does not exist: KFP is installed without the loop.
        parameters: the run parameters, typed (`loop.run_parameters`).
        tracking_password: the runs' MLflow user's password (``pipelines``, the one the
            tracking server's users file holds): its Secret, the cluster CA and the
            fences to the server are installed with it; None: the runs reach no MLflow.
    """

    provider: k8s.Provider
    spec: PipelinesSpec
    placement: PipelinesPlacement
    kubernetes_version: str
    database_password: pulumi.Input[str]
    object_store_keys: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None
    pipeline: loop.PipelineIR | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    tracking_password: pulumi.Input[str] | None = None


class KubeflowPipelines(KubernetesComponent[PipelinesArgs]):
    """Kubeflow Pipelines 2.17.0, its database and store settings, its fences, and the
    data-to-model loop (upload, recurring run, drift trigger)."""

    def declare(self, name: str, args: PipelinesArgs) -> Outputs:
        spec, placement, provider = args.spec, args.placement, args.provider

        def add(manifest: Manifest, after: Sequence[pulumi.Resource] = (), **kw: Any) -> Any:
            return register(manifest, self, provider, depends_on=after, **kw)

        root = pulumi.Output.from_input(placement.bucket).apply(pipeline_root)
        objects = kfp.install_objects(spec, placement, args.kubernetes_version, root)
        ns = add(objects[0])
        crds = [add(o) for o in objects if o["kind"] == "CustomResourceDefinition"]
        password = pulumi.Output.secret(args.database_password)
        ready: list[pulumi.Resource] = [ns, *crds]
        for manifest in kfp.database_secrets(password, password.apply(kfp.proxy_userlist)):
            ready.append(add(manifest, [ns]))
        host = pulumi.Output.from_input(kfp.database_host(placement))
        ready.append(add(kfp.proxy_config(host.apply(kfp.proxy_ini)), [ns]))
        if placement.on_aws:
            ready.append(add(kfp.database_ca_configmap(placement), [ns]))
        ready.append(add(kfp.apiserver_configmap(), [ns]))
        # The certificates (API server, UI proxy) and the CA bundle every client here
        # mounts (KFP's own, the loop's, the tracked steps).
        ready += [add(certificate, [ns]) for certificate in kfp.tls_objects()]
        if placement.on_aws:
            init_secret = add(
                kfp.secret(kfp.DATABASE_INIT_SECRET, "mlflow", {"password": password})
            )
            ready.append(add(kfp.database_init_job(placement, host), [init_secret]))
        else:
            owner_data = {"username": DATABASE_USER, "password": password}
            owner_secret = kfp.secret(
                kfp.DATABASE_OWNER_SECRET, NAMESPACE, owner_data, "kubernetes.io/basic-auth"
            )
            owner = add(owner_secret, [ns])
            # The database is data: protected like the tracking server's.
            ready.append(add(kfp.database_cluster(spec, placement), [owner], protect=True))
        if args.object_store_keys is not None:
            access, secret_key = (pulumi.Output.secret(k) for k in args.object_store_keys)
            pair = {"accesskey": access, "secretkey": secret_key}
            ready.append(add(kfp.secret(kfp.OBJECT_STORE_SECRET, NAMESPACE, pair), [ns]))
        for policy in kfp.network_policies(spec, placement):
            add(policy, [ns])
        if args.tracking_password is not None:
            # The tracked steps' MLflow user, the CA they verify the server with, and
            # the way to its TLS port (kfp.tracking_credentials and after).
            tracking_secret = pulumi.Output.secret(args.tracking_password)
            ready.append(add(kfp.tracking_credentials(tracking_secret), [ns]))
            add(kfp.runs_tracking_egress(), [ns])
            add(kfp.tracking_allowance())
        installed = [add(o, ready) for o in objects[1:] if o["kind"] != "CustomResourceDefinition"]
        version = None
        if args.pipeline is not None:
            version = args.pipeline.version
            # The loop's objects in order; a Certificate (the trigger's) before every
            # object after it, so the Deployment that mounts its Secret waits for it.
            certificates: list[pulumi.Resource] = []
            for manifest in loop.loop_objects(spec, placement, args.pipeline, args.parameters):
                resource = add(manifest, [ns, *installed, *certificates])
                if manifest["kind"] == "Certificate":
                    certificates.append(resource)
        return {"namespace": NAMESPACE, "pipelineVersion": version}
