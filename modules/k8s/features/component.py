"""`FeatureStore`: registers what `modules.k8s.features.spec` builds.

Thin on purpose: every object and value comes from a pure function of the spec (tested
against the upstream charts and schemas); this file only adds the secrets, orders the
objects and sends them through the cluster's provider.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from modules.component_base import KubernetesComponent, Outputs
from modules.k8s.common import helm_release, namespace, register
from modules.k8s.features import network as policies
from modules.k8s.features import spec as fs
from modules.k8s.features import training as ft
from modules.k8s.names import TrackingAccess
from modules.k8s.netpol import ClusterNetwork
from modules.pools import NodePoolProfile


@dataclass(frozen=True)
class FeatureTrainingArgs:
    """The tabular model's TrainJob (`modules.k8s.features.training`).

    Args:
        team: the team whose namespace and Kueue queue run it.
        pool: its CPU training pool.
        held: created without the queue label (nothing starts it).
        tracking: the MLflow tracking server it registers in, as its team's user
            (`modules.k8s.tracking.manifests.team_tracking_access`).
    """

    team: str
    pool: NodePoolProfile
    held: bool
    tracking: TrackingAccess


@dataclass(frozen=True)
class FeatureStoreArgs:
    """Args of `FeatureStore`.

    Args:
        provider: the cluster's Kubernetes provider; every object uses it explicitly.
        spec: the validated settings.
        placement: AWS or on premises, the registry, the offline URI, the system pool.
        kubernetes_version: the cluster's minor version (Pod Security labels).
        ca_issuer: the ClusterIssuer of the endpoint's certificate (the serving CA).
        registry_password: the registry role's password (secret config
            ``featuresRegistryPassword``).
        redis_password: the online store's password (secret config
            ``featuresRedisAuthToken``; on AWS also ElastiCache's AUTH token).
        network: where the API server is (the proxy reviews tokens there) and the nodes.
        registry_host: the registry database host (the tracking RDS address on AWS).
        redis_host: the online store host (ElastiCache's primary endpoint on AWS).
        storage_class: the volumes' class on premises.
        tracking_database_secret: the ``mlflow`` Secret with the RDS master user (AWS).
        training: the training TrainJob, where the stack runs one.
        vpc_cidr: on AWS the VPC, where the registry database, the online store and the
            S3/STS endpoints are; ``None`` on premises.
    """

    provider: k8s.Provider
    spec: fs.FeaturesSpec
    placement: fs.Placement
    kubernetes_version: str
    ca_issuer: str
    registry_password: pulumi.Input[str]
    redis_password: pulumi.Input[str]
    network: ClusterNetwork
    registry_host: pulumi.Input[str] = ""
    redis_host: pulumi.Input[str] = ""
    storage_class: str = ""
    tracking_database_secret: str = "mlflow-db"
    training: FeatureTrainingArgs | None = None
    vpc_cidr: pulumi.Input[str] | None = None


def _secret(name: str, ns: str, data: dict[str, pulumi.Input[str]]) -> fs.Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": "Opaque",
        "stringData": data,
    }


class FeatureStore(KubernetesComponent[FeatureStoreArgs]):
    """Feast's registry, online store, feature server and materialisation."""

    def declare(self, name: str, args: FeatureStoreArgs) -> Outputs:
        spec, placement, provider = args.spec, args.placement, args.provider
        ns = register(
            namespace(fs.NAMESPACE, "restricted", args.kubernetes_version), self, provider
        )
        network = args.network
        # Default deny and the exact paths, before any pod of the namespace runs.
        fences = [
            register(m, self, provider, [ns])
            for m in policies.network_policies(
                spec, network, args.vpc_cidr if placement.on_aws else None
            )
        ]
        registry_password = pulumi.Output.secret(args.registry_password)
        redis_password = pulumi.Output.secret(args.redis_password)
        on_aws = placement.on_aws
        registry_host = args.registry_host if on_aws else fs.registry_host(False)
        redis_host = args.redis_host if on_aws else fs.redis_host_onprem()
        credentials = register(
            _secret(
                fs.CREDENTIALS_SECRET,
                fs.NAMESPACE,
                {
                    fs.ENV_REGISTRY_HOST: registry_host,
                    fs.ENV_REGISTRY_PASSWORD: registry_password,
                    fs.ENV_REDIS_HOST: redis_host,
                    fs.ENV_REDIS_PASSWORD: redis_password,
                },
            ),
            self,
            provider,
            [ns],
        )
        stores: list[pulumi.Resource] = [credentials]
        if on_aws:
            # The RDS authorities the registry's clients verify the database with (on
            # premises CloudNativePG writes its cluster's CA Secret).
            stores.append(register(fs.registry_ca_configmap(placement), self, provider, [ns]))
            init_secret = register(
                _secret(fs.REGISTRY_INIT_SECRET, "mlflow", {"password": registry_password}),
                self,
                provider,
            )
            if args.vpc_cidr is None:
                raise ValueError("the feature store on AWS needs the VPC's CIDR")
            init_fence = register(policies.registry_init_policy(args.vpc_cidr), self, provider)
            job = fs.registry_init_job(placement, args.tracking_database_secret, args.registry_host)
            stores.append(register(job, self, provider, [init_secret, init_fence]))
        else:
            # CloudNativePG's operator (in its own default-deny namespace) reaches the
            # registry's instances.
            register(policies.operator_egress_policy(), self, provider)
            owner = register(
                {
                    **_secret(
                        f"{fs.REGISTRY_CLUSTER}-owner",
                        fs.NAMESPACE,
                        {"username": fs.REGISTRY_USER, "password": registry_password},
                    ),
                    "type": "kubernetes.io/basic-auth",
                },
                self,
                provider,
                [ns],
            )
            stores.append(
                register(
                    fs.onprem_registry_cluster(placement, args.storage_class),
                    self,
                    provider,
                    [owner],
                    protect=True,
                )
            )
            users = register(
                _secret(fs.ONLINE_USERS_SECRET, fs.NAMESPACE, {"default": redis_password}),
                self,
                provider,
                [ns],
            )
            certificate = register(
                fs.online_store_certificate(args.ca_issuer), self, provider, [ns]
            )
            stores.append(
                helm_release(
                    fs.ONLINE_RELEASE,
                    fs.VALKEY_CHART,
                    fs.NAMESPACE,
                    values=fs.valkey_values(spec, placement, args.storage_class),
                    parent=self,
                    provider=provider,
                    depends_on=[users, certificate],
                )
            )
        for manifest in [
            *fs.rbac_objects(spec),
            *fs.proxy_objects(spec, placement, args.ca_issuer),
            fs.repo_configmap(placement),
            fs.materialize_cronjob(spec, placement),
            fs.apply_job(spec, placement),
        ]:
            register(manifest, self, provider, [ns, *fences, *stores])
        for client in spec.client_namespaces:
            register(fs.client_egress_policy(client), self, provider)
        if args.training is not None:
            self._training(args.training, spec, placement, provider)
        helm_release(
            fs.SERVER_RELEASE,
            fs.FEATURE_SERVER_CHART,
            fs.NAMESPACE,
            values=fs.feature_server_values(spec, placement),
            parent=self,
            provider=provider,
            depends_on=[ns, *stores],
        )
        return {}

    def _training(
        self,
        training: FeatureTrainingArgs,
        spec: fs.FeaturesSpec,
        placement: fs.Placement,
        provider: k8s.Provider,
    ) -> None:
        image = fs.image(placement, "features", spec.image_tag)
        runtime = register(
            ft.training_runtime(training.pool, image, training.tracking), self, provider
        )
        account = register(ft.service_account(training.team), self, provider)
        job = ft.train_job(
            team=training.team,
            pool=training.pool.name,
            image=image,
            offline_uri=placement.offline_uri,
            s3_endpoint=fs.s3_endpoint(placement),
            region=placement.region,
            tracking_uri=training.tracking.uri,
            held=training.held,
        )
        register(job, self, provider, [runtime, account])
