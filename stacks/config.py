"""The stack configuration: typed, frozen, validated before any resource exists.

Each section of a stack file (``stacks/Pulumi.<stack>.yaml``, keys under the project
namespace ``uae-gpu-platform:``) is a frozen dataclass whose ``__post_init__`` records
every problem it finds; `stacks.config_parsing` maps the file's camelCase keys onto
these fields and reports all problems of all sections at once. Checks that need AWS's
catalog (is the instance type offered here? does it have EFA?) live in
`stacks.catalog`, because they need the region's data.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from modules.aws.backup_spec import BackupSpec
from modules.aws.identity_spec import IdentitySpec, identity_problems
from modules.aws.key_custody_spec import KeyCustodySpec, endpoint_service_region
from modules.aws.node_pool_spec import NodePoolSpec
from modules.aws.site_link_spec import SiteLinkSpec
from modules.k8s.fabric.spec import InfinibandSpec
from modules.k8s.features.spec import FeaturesSpec
from modules.k8s.fleet.spec import MIN_MANAGER_KUBERNETES, FleetSpec, FleetWorkerSpec
from modules.k8s.gateway.spec import LlmGatewaySpec
from modules.k8s.gateway.spec import stack_problems as gateway_problems
from modules.k8s.gpu.spec import ConfidentialComputingSpec, confidential_computing_problems
from modules.k8s.llm.spec import LLMSpec, llm_stack_problems
from modules.k8s.monitoring.spec import MonitoringSpec
from modules.k8s.pipelines.spec import PipelinesSpec, placement_problems
from modules.k8s.queueing.spec import QueueingSpec
from modules.k8s.serving.spec import ServingSpec
from modules.k8s.site.onprem import OnPremSpec
from modules.k8s.site.spec import SiteSpec
from modules.k8s.site_audit.spec import ApiAuditSpec
from modules.k8s.spark.spec import SparkSpec, stack_problems
from modules.k8s.tenancy.quotas import quota_problems
from modules.k8s.tenancy.spec import TeamSpec
from modules.k8s.tracking.spec import TrackingSpec
from modules.k8s.trainer.spec import TrainerSpec
from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS
from modules.pools import NodePoolProfile
from modules.residency import UAE_AWS_REGIONS
from modules.validation import Checker, bounded
from workloads.training.config import PRESETS

from .config_parsing import ConfigError, camel, parse_section
from .cost_config import OnPremPricing, TeamBudget

PROJECT = "uae-gpu-platform"

#: Secret config values of a custom key store (``keys``): the CloudHSM ``kmsuser``
#: password, and the external key store proxy's credential.
KEY_STORE_SECRET_KEYS = ("keyStorePassword", "xksProxyAccessKeyId", "xksProxySecretAccessKey")


# Keys read outside the typed sections (secrets are never parsed into dataclasses); the
# offline plan gives every stack a stand-in for these. A key store's secrets are only
# needed by `hsm` stacks, whose files must hold them (`pulumi config set --secret`).
SECRET_KEYS = (
    "kubeconfig",
    "trackingAdminPassword",
    "trackingBackupAccessKeyId",
    "trackingBackupSecretAccessKey",
    "featuresRegistryPassword",
    "featuresRedisAuthToken",
    # Kubeflow Pipelines (docs/pipelines.md): its database role; on premises the site
    # object store's key pair.
    "pipelinesDatabasePassword",
    "pipelinesObjectStoreAccessKey",
    "pipelinesObjectStoreSecretKey",
    # The LLM gateway (docs/llm-gateway.md): what the teams' API keys are derived from.
    "llmGatewayApiKeySeed",
)

# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096,
                      1827, 2192, 2557, 2922, 3288, 3653)  # fmt: skip

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$")
_ROLE_ARN = re.compile(r"^arn:aws:iam::\d{12}:role/[\w+=,.@/-]+$")


def _is_cidr(value: str) -> bool:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class NetworkConfig:
    """The VPC.

    Args:
        vpc_cidr: IPv4 block of the VPC, /16 to /20 (default ``10.42.0.0/16``); each
            zone gets a private /19-equivalent share for nodes and pods and a small public
            share for NAT gateways and load balancers.
        zone_count: how many of the region's zones the VPC spans (default 3).
        nat_gateway_per_zone: one NAT gateway per zone (default true) so a zone outage
            does not cut the others' egress; false saves cost in dev stacks.
        flow_log_retention_days: how long VPC flow logs are kept (default 365).
    """

    vpc_cidr: str = "10.42.0.0/16"
    zone_count: int = 3
    nat_gateway_per_zone: bool = True
    flow_log_retention_days: int = 365

    def __post_init__(self) -> None:
        check = Checker()
        if _is_cidr(self.vpc_cidr):
            prefix = ipaddress.ip_network(self.vpc_cidr).prefixlen
            check.require(16 <= prefix <= 20, "vpc_cidr", self.vpc_cidr, "use a /16 to /20 block")
        else:
            check.require(
                False, "vpc_cidr", self.vpc_cidr, "expected an IPv4 CIDR like 10.42.0.0/16"
            )
        check.require(2 <= self.zone_count <= 6, "zone_count", self.zone_count, "use 2 to 6 zones")
        check.require(
            self.flow_log_retention_days in LOG_RETENTION_DAYS,
            "flow_log_retention_days",
            self.flow_log_retention_days,
            f"CloudWatch accepts {', '.join(map(str, LOG_RETENTION_DAYS))}",
        )
        check.done()


@dataclass(frozen=True)
class ClusterConfig:
    """The EKS control plane.

    Args:
        public_access_cidrs: CIDRs allowed to reach a public API endpoint. Empty (the
            default) keeps the endpoint private: reach it from inside the VPC, over a VPN
            or Direct Connect. ``0.0.0.0/0`` is refused.
        admin_role_arns: IAM roles given cluster-admin through EKS access entries.
        log_retention_days: retention of the control-plane log group (default 365).
        endpoint_private_access: keep the private endpoint on (default true).
        creator_admin_access: give the identity that creates the cluster (the one
            running ``pulumi up``) an admin access entry, so the same run can install
            the Kubernetes layer (default true). Once that identity's role is listed in
            ``adminRoleArns``, set false: the entry is removed and only listed roles
            administer the cluster.
    """

    public_access_cidrs: tuple[str, ...] = ()
    admin_role_arns: tuple[str, ...] = ()
    log_retention_days: int = 365
    endpoint_private_access: bool = True
    creator_admin_access: bool = True

    def __post_init__(self) -> None:
        check = Checker()
        for i, cidr in enumerate(self.public_access_cidrs):
            key = f"public_access_cidrs[{i}]"
            if not _is_cidr(cidr):
                check.require(False, key, cidr, "expected a CIDR like 203.0.113.0/24")
            else:
                open_to_all = ipaddress.ip_network(cidr).prefixlen == 0
                check.require(not open_to_all, key, cidr, "the API may not be open to everyone")
        for i, arn in enumerate(self.admin_role_arns):
            check.require(
                bool(_ROLE_ARN.match(arn)),
                f"admin_role_arns[{i}]",
                arn,
                "expected an IAM role ARN like arn:aws:iam::123456789012:role/platform-admin",
            )
        check.require(
            self.log_retention_days in LOG_RETENTION_DAYS,
            "log_retention_days",
            self.log_retention_days,
            f"CloudWatch accepts {', '.join(map(str, LOG_RETENTION_DAYS))}",
        )
        check.require(
            self.endpoint_private_access or bool(self.public_access_cidrs),
            "endpoint_private_access",
            self.endpoint_private_access,
            "a cluster needs a private endpoint or listed public CIDRs",
        )
        check.done()


@dataclass(frozen=True)
class FsxConfig:
    """FSx for Lustre shared training storage, linked to the data bucket.

    Args:
        enabled: create the file system (default false).
        storage_capacity_gib: 1200, or a multiple of 2400 (default 1200).
        throughput_mib_per_tib: PERSISTENT_2 throughput per TiB: 125, 250, 500 or 1000
            (default 250).
        file_system_path: where the bucket appears in the file system (default ``/data``).
    """

    enabled: bool = False
    storage_capacity_gib: int = 1200
    throughput_mib_per_tib: Literal[125, 250, 500, 1000] = 250
    file_system_path: str = "/data"

    def __post_init__(self) -> None:
        check = Checker()
        size = self.storage_capacity_gib
        check.require(
            size == 1200 or (size > 0 and size % 2400 == 0),
            "storage_capacity_gib",
            size,
            "PERSISTENT_2 takes 1200 or a multiple of 2400",
        )
        check.require(
            self.file_system_path.startswith("/") and self.file_system_path != "/",
            "file_system_path",
            self.file_system_path,
            "use an absolute path below / such as /data",
        )
        check.done()


@dataclass(frozen=True)
class StorageConfig:
    """Datasets, checkpoints and images.

    Args:
        fsx: FSx for Lustre settings (see `FsxConfig`).
        noncurrent_version_retention_days: how long overwritten or deleted object
            versions (old checkpoints) are kept before expiry (default 30).
        access_log_retention_days: how long S3 server access logs are kept (default 365).
        registry_name: name of the ECR repository for training images (default ``training``).
    """

    fsx: FsxConfig = field(default_factory=FsxConfig)
    noncurrent_version_retention_days: int = bounded(1, 3650, default=30)
    access_log_retention_days: int = bounded(1, 3650, default=365)
    registry_name: str = "training"

    def __post_init__(self) -> None:
        check = Checker()
        check.ranges(self)
        check.require(
            bool(re.match(r"^[a-z0-9]+([._/-][a-z0-9]+)*$", self.registry_name)),
            "registry_name",
            self.registry_name,
            "use lowercase letters, digits and . _ / -",
        )
        check.done()


@dataclass(frozen=True)
class ExampleJobSpec:
    """The bundled example training job each stack deploys, suspended.

    Args:
        team: the team whose namespace, queue and bucket prefix it uses.
        pool: the node pool it runs on.
        preset: the training preset (see `workloads.training.config`), default ``gpt2-124m``.
        nodes: how many nodes (one pod each), default 1.
        suspended: keep the job suspended and out of the queue until a user releases it
            by setting this to false (default true).
        min_nodes: make the job elastic: it continues with as few as this many nodes
            (`modules.k8s.trainer.training_job.spec.TrainingJobSpec.min_nodes`); default:
            fixed.
        tp: tensor-parallel degree inside a node (`TrainingJobSpec.tp`); default 1. The
            job's memory plan must fit the pool's GPUs either way.
    """

    team: str
    pool: str
    preset: str = "gpt2-124m"
    nodes: int = 1
    suspended: bool = True
    min_nodes: int | None = None
    tp: int = 1

    def __post_init__(self) -> None:
        check = Checker()
        check.require(self.nodes >= 1, "nodes", self.nodes, "at least 1")
        check.require(self.preset in PRESETS, "preset", self.preset, f"one of {', '.join(PRESETS)}")
        check.done()


@dataclass(frozen=True)
class ExampleServiceSpec:
    """The example model service each stack deploys, held until released.

    Args:
        team: the team whose namespace it runs in (and whose ``inference``
            ServiceAccount reads the model).
        pool: the node pool it runs on: a CPU pool serves the int8 model with the CPU
            predictor, a GPU pool the ONNX model with Triton.
        model_name: the registered model's name (default ``uae-gpt``).
        model_version: the registered version served as stable (default 1).
        storage_path: that version's artifact directory: below ``mlflow/`` in the data
            bucket on AWS, a path on the team's volume on premises.
        client_namespaces: namespaces whose applications may call the endpoint (default:
            the team's own namespace).
        min_replicas: fewest replicas (default 1).
        max_replicas: most replicas (default 2).
        canary_version: a new version to try on part of the traffic (default none).
        canary_storage_path: the canary version's artifact directory.
        canary_traffic_percent: the canary's share of requests (1-99; 0 without canary).
        released: false (the default) keeps the service stopped: no pods run until a user
            sets it to true.
    """

    team: str
    pool: str
    storage_path: str
    model_name: str = "uae-gpt"
    model_version: int = 1
    client_namespaces: tuple[str, ...] = ()
    min_replicas: int = 1
    max_replicas: int = 2
    canary_version: int | None = None
    canary_storage_path: str | None = None
    canary_traffic_percent: int = 0
    released: bool = False

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            (self.canary_version is None) == (self.canary_storage_path is None),
            "canary_storage_path",
            self.canary_storage_path,
            "set canaryVersion and canaryStoragePath together (or neither)",
        )
        check.done()


@dataclass(frozen=True)
class StackConfig:
    """Everything a stack file sets (keys under ``uae-gpu-platform:``).

    Args:
        target: ``aws`` (build the AWS foundation and EKS) or ``onprem`` (an existing
            cluster; no AWS resources).
        region: the AWS region every resource is pinned to (default ``me-central-1``).
        allowed_regions: regions data may live in (default ``[me-central-1]``); only UAE
            regions may be listed.
        kubernetes_version: EKS minor version, e.g. ``"1.33"``.
        tags: tags on every AWS resource; ``owner`` and ``data-classification`` are
            required, ``residency`` is added as ``uae``.
        network: VPC settings (`NetworkConfig`).
        cluster: EKS control-plane settings (`ClusterConfig`).
        node_pools: the managed node groups (`NodePoolSpec`); exactly one ``system`` pool.
        storage: bucket, FSx and registry settings (`StorageConfig`).
        teams: the tenants (`TeamSpec`): a namespace, quota and queue each.
        monitoring: Prometheus, Grafana and alerting settings (`MonitoringSpec`).
        queueing: Kueue settings (`QueueingSpec`).
        site: where an on-premises cluster runs (`SiteSpec`, kind ``on-premises``);
            AWS stacks derive theirs from the region.
        onprem: settings of an existing on-premises cluster (`OnPremSpec`).
        onprem_node_pools: the on-premises cluster's node pools as they exist
            (`NodePoolProfile`: GPUs, InfiniBand resource, labels the nodes carry).
        infiniband: the InfiniBand fabric on premises (`InfinibandSpec`).
        example_job: the bundled example training job (`ExampleJobSpec`), deployed
            suspended; ``null`` for none.
        training_image_tag: tag of the training image (``workloads/Dockerfile``) in the
            stack's registry, used by the example job (never ``latest``: tags are
            immutable).
        training_image: full reference of the training image for an onprem stack, which
            has no registry of its own (e.g. the UAE region's ECR or a UAE registry the
            policy pack allows); AWS stacks use their own ECR repository.
        tracking: the MLflow tracking server and model registry (`TrackingSpec`),
            deployed by default; its admin password is the secret config value
            ``trackingAdminPassword``.
        serving: model serving with KServe (`ServingSpec`); ``null`` (the default)
            installs none.
        example_service: the bundled example model service (`ExampleServiceSpec`),
            deployed stopped; ``null`` for none. Needs ``serving``.
        features: the feature store (`FeaturesSpec`, docs/features.md), off by default;
            needs ``serving`` and ``tracking``, and the secret config values
            ``featuresRegistryPassword`` and ``featuresRedisAuthToken``.
        fleet: this stack is a MultiKueue manager bursting to the listed worker stacks
            (`FleetSpec`, see docs/fleet.md); ``null`` for none.
        fleet_worker: this stack is a MultiKueue worker of the named manager stack
            (`FleetWorkerSpec`); ``null`` for none.
        onprem_pricing: an on-premises site's prices per GPU-hour, vCPU-hour and
            GiB-hour (`OnPremPricing`), for OpenCost and ``make cost``.
        budgets: monthly cost budgets per team (`TeamBudget`, see docs/cost.md).
        identity: how people get into an EKS cluster (`IdentitySpec`): each team's
            IAM Identity Center group and the role it signs in as, mapped to an access
            entry scoped to the team's namespace; ``null`` for none.
        site_link: a fleet worker's private link to its manager's on-premises site
            (`SiteLinkSpec`: Site-to-Site VPN or Direct Connect; docs/fleet.md).
        api_audit: an on-premises site's API audit-log policy (`ApiAuditSpec`).
        keys: key custody (`KeyCustodySpec`, docs/compliance.md "Key custody"): AWS
            KMS's own HSMs (default) or a custom key store (CloudHSM or external);
            AWS stacks only.
        backup: AWS Backup of the stack's data (`BackupSpec`, docs/recovery.md); AWS
            stacks get the defaults when unset; ``enabled: false`` for none.
        trainer: Kubeflow Trainer and the platform's training runtimes (`TrainerSpec`,
            see docs/workloads.md), installed by default.
        pipelines: Kubeflow Pipelines and the data-to-model loop (`PipelinesSpec`,
            docs/pipelines.md), off by default; needs ``tracking`` and the secret config
            value ``pipelinesDatabasePassword``.
        spark: the Spark Operator and the data-preparation jobs (`SparkSpec`,
            docs/data.md), off by default.
        llm_gateway: the LLM gateway (`LlmGatewaySpec`, docs/llm-gateway.md): per team
            the models it may call and its tokens per minute and per month, and each
            model's price per million tokens; ``null`` (the default) installs none.
            Needs the secret config value ``llmGatewayApiKeySeed``.
        confidential_computing: GPU pools of an on-premises site whose nodes may run
            their GPUs in confidential-computing mode (`ConfidentialComputingSpec`,
            docs/llm-cluster.md); ``null`` for none.
        llm: LLM serving (`LLMSpec`, docs/llm-cluster.md): KServe's LLMInferenceService
            on GPU pools, vLLM's CPU build scaled to zero on CPU pools, KEDA and
            LeaderWorkerSet; ``null`` (the default) installs none. Needs ``serving``.
        require_image_digests: every image of the stack's Kubernetes objects must be
            pinned by the stack's image lock (``stacks/images/<stack>.json``, written by
            ``make pin-images``; `stacks.image_lock`): a missing lock, or an image it
            does not hold, stops the run with the image named. Default false: images the
            lock holds are pinned, the others run by tag.
    """

    target: Literal["aws", "onprem"] = "aws"
    region: str = "me-central-1"
    allowed_regions: tuple[str, ...] = ("me-central-1",)
    kubernetes_version: str = "1.33"
    tags: dict[str, str] = field(default_factory=dict)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    node_pools: tuple[NodePoolSpec, ...] = ()
    storage: StorageConfig = field(default_factory=StorageConfig)
    teams: tuple[TeamSpec, ...] = ()
    monitoring: MonitoringSpec = field(default_factory=MonitoringSpec)
    queueing: QueueingSpec = field(default_factory=QueueingSpec)
    site: SiteSpec | None = None
    onprem: OnPremSpec | None = None
    onprem_node_pools: tuple[NodePoolProfile, ...] = ()
    infiniband: InfinibandSpec | None = None
    example_job: ExampleJobSpec | None = None
    training_image_tag: str = "0.1.0"
    training_image: str | None = None
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    serving: ServingSpec | None = None
    example_service: ExampleServiceSpec | None = None
    features: FeaturesSpec = field(default_factory=FeaturesSpec)
    # -- fleet and cost sections (docs/fleet.md, docs/cost.md) --
    fleet: FleetSpec | None = None
    fleet_worker: FleetWorkerSpec | None = None
    onprem_pricing: OnPremPricing | None = None
    budgets: tuple[TeamBudget, ...] = ()
    # -- who gets in, the site link, the site's audit log (issue 23) --
    identity: IdentitySpec | None = None
    site_link: SiteLinkSpec | None = None
    api_audit: ApiAuditSpec | None = None
    # -- key custody and backup sections (docs/compliance.md, docs/recovery.md) --
    keys: KeyCustodySpec | None = None
    backup: BackupSpec | None = None
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    pipelines: PipelinesSpec = field(default_factory=PipelinesSpec)
    spark: SparkSpec = field(default_factory=SparkSpec)
    # -- the LLM gateway (docs/llm-gateway.md) --
    llm_gateway: LlmGatewaySpec | None = None
    # -- LLM serving (docs/llm-cluster.md) --
    llm: LLMSpec | None = None
    confidential_computing: ConfidentialComputingSpec | None = None
    require_image_digests: bool = False

    def __post_init__(self) -> None:
        check = Checker()
        self._check_target(check)
        self._check_pipelines(check)
        self._check_fleet_and_cost(check)
        self._check_access_and_link(check)
        self._check_keys_and_backup(check)
        for i, region in enumerate(self.allowed_regions):
            check.require(
                region in UAE_AWS_REGIONS,
                f"allowed_regions[{i}]",
                region,
                f"only UAE regions may be allowed: {', '.join(UAE_AWS_REGIONS)}",
            )
        check.require(
            self.region in self.allowed_regions,
            "region",
            self.region,
            f"must be one of allowedRegions: {', '.join(self.allowed_regions)}",
        )
        check.require(
            bool(re.fullmatch(r"[\w][\w.-]{0,127}", self.training_image_tag))
            and self.training_image_tag != "latest",
            "training_image_tag",
            self.training_image_tag,
            "pin an immutable tag such as 0.1.0, not latest",
        )
        check.require(
            self.kubernetes_version in SUPPORTED_KUBERNETES_VERSIONS,
            "kubernetes_version",
            self.kubernetes_version,
            f"supported versions: {', '.join(SUPPORTED_KUBERNETES_VERSIONS)}"
            + _unquoted_version_hint(self.kubernetes_version),
        )
        for required in ("owner", "data-classification"):
            check.require(required in self.tags, f"tags.{required}", None, "this tag is required")
        _check_unique_names(check, "node_pools", [p.name for p in self.node_pools])
        _check_unique_names(check, "onprem_node_pools", [p.name for p in self.onprem_node_pools])
        if self.target == "aws":
            check.require(
                bool(self.node_pools), "node_pools", [], "declare the node pools (one system pool)"
            )
            systems = [p.name for p in self.node_pools if p.role == "system"]
            check.require(
                not self.node_pools or len(systems) == 1,
                "node_pools",
                systems,
                "declare exactly one pool with role system",
            )
        _check_unique_names(check, "teams", [t.name for t in self.teams])
        if self.target == "onprem":
            # The site's pools are declared here; an AWS stack's node shapes come from
            # the catalog, so `stacks.catalog` checks its quotas.
            check.problems += quota_problems(self.teams, self.onprem_node_pools)
        self._check_serving(check)
        self._check_mirror_registries(check)
        teams = [t.name for t in self.teams]  # Spark's jobs against the teams and pools
        pools = (self.node_pools, self.onprem_node_pools)
        check.problems += stack_problems(self.spark, self.target, teams, *pools)
        check.problems += gateway_problems(self.llm_gateway, teams)
        pool_names = [p.name for pool_list in pools for p in pool_list]
        cpu_pools = [p.name for p in self.node_pools if p.role != "gpu"]
        cpu_pools += [p.name for p in self.onprem_node_pools if not p.has_gpus]
        check.problems += llm_stack_problems(
            self.llm,
            teams,
            pool_names,
            self.serving is not None,
            cpu_pools=cpu_pools,
            has_gateway=self.llm_gateway is not None,
        )
        if self.confidential_computing is not None:
            check.require(
                self.target == "onprem",
                "confidential_computing",
                None,
                "on premises only: the site's own H100 hosts (SEV-SNP or TDX) switch to CC mode",
            )
            check.problems += confidential_computing_problems(
                self.confidential_computing, self.onprem_node_pools
            )
        check.done()

    def _check_mirror_registries(self, check: Checker) -> None:
        """Where the tracking server's and the LLM gateway's images come from: the site's
        registry on premises, the stack's own ECR on AWS (as serving's)."""
        sections: list[tuple[str, str, str | None, str]] = []
        if self.tracking.enabled:
            sections.append(("tracking", "tracking server", self.tracking.registry, "lifecycle"))
        if self.llm_gateway is not None:
            gateway = self.llm_gateway
            sections.append(("llm_gateway", "LLM gateway", gateway.registry, "llm-gateway"))
        for section, what, registry, doc in sections:
            if self.target == "onprem":
                check.require(
                    registry is not None,
                    f"{section}.registry",
                    None,
                    f"an onprem stack names the registry holding the {what}'s mirrored "
                    f"images (docs/{doc}.md)",
                )
            else:
                check.require(
                    registry is None,
                    f"{section}.registry",
                    registry,
                    "leave unset on AWS: the stack's own ECR repositories are used",
                )

    def _check_serving(self, check: Checker) -> None:
        """Model serving: where its images come from, and the example service's place."""
        if self.serving is not None and self.target == "onprem":
            check.require(
                self.serving.registry is not None,
                "serving.registry",
                None,
                "an onprem stack names the site's registry for the serving images",
            )
        if self.serving is not None and self.target == "aws":
            check.require(
                self.serving.registry is None,
                "serving.registry",
                self.serving.registry,
                "leave unset on AWS: the stack's own ECR repositories are used",
            )
        service = self.example_service
        if service is None:
            return
        check.require(
            self.serving is not None,
            "serving",
            None,
            "an example service needs serving (KServe): add the serving section",
        )
        teams = [t.name for t in self.teams]
        check.require(
            service.team in teams,
            "example_service.team",
            service.team,
            f"must be one of the teams: {', '.join(teams) or '(none declared)'}",
        )
        pools = [p.name for p in self.node_pools] + [p.name for p in self.onprem_node_pools]
        if pools:
            check.require(
                service.pool in pools,
                "example_service.pool",
                service.pool,
                f"must be one of the node pools: {', '.join(pools)}",
            )

    def _check_target(self, check: Checker) -> None:
        if self.target == "onprem":
            for name, value in (("onprem", self.onprem), ("site", self.site)):
                check.require(value is not None, name, None, "required for target onprem")
            check.require(
                self.site is None or self.site.kind == "on-premises",
                "site.kind",
                self.site and self.site.kind,
                "an onprem stack's site kind is on-premises",
            )
            check.require(
                not self.node_pools,
                "node_pools",
                [p.name for p in self.node_pools],
                "EKS node pools are for target aws; declare onpremNodePools instead",
            )
            check.require(
                bool(self.onprem_node_pools), "onprem_node_pools", [], "declare the cluster's pools"
            )
        else:
            for name, value in (("onprem", self.onprem), ("site", self.site)):
                check.require(value is None, name, value, "only for target onprem")
            check.require(
                not self.onprem_node_pools,
                "onprem_node_pools",
                [p.name for p in self.onprem_node_pools],
                "only for target onprem; declare nodePools",
            )
        job = self.example_job
        pools = [p.name for p in self.node_pools] + [p.name for p in self.onprem_node_pools]
        teams = [t.name for t in self.teams]
        # Membership is only checked against sections that parsed: a broken section
        # falls back to empty and has been reported already.
        if job is not None and teams:
            check.require(
                job.team in teams,
                "example_job.team",
                job.team,
                f"must be one of the teams: {', '.join(teams)}",
            )
        elif job is not None:
            check.require(False, "teams", [], f"declare team {job.team!r} for the example job")
        if job is not None and self.target == "onprem":
            check.require(
                self.training_image is not None,
                "training_image",
                None,
                "an onprem stack with an example job needs the training image reference",
            )
        if job is not None and pools:
            check.require(
                job.pool in pools,
                "example_job.pool",
                job.pool,
                f"must be one of the node pools: {', '.join(pools)}",
            )

    def _check_fleet_and_cost(self, check: Checker) -> None:
        """This stack's own view of the fleet and cost sections; what needs the other
        stacks' files (managers, cycles, worker sites) is `stacks.fleet`'s."""
        teams = [t.name for t in self.teams]
        if self.fleet is not None:
            check.require(
                self.fleet_worker is None,
                "fleet_worker",
                self.fleet_worker and self.fleet_worker.manager,
                "a stack is a fleet manager or a worker, not both (MultiKueue has one level)",
            )
            version = tuple(int(p) for p in self.kubernetes_version.split(".")[:2])
            check.require(
                version >= MIN_MANAGER_KUBERNETES,
                "kubernetes_version",
                self.kubernetes_version,
                "a fleet manager needs Kubernetes 1.32 or later (Job managedBy)",
            )
            for i, team in enumerate(self.fleet.burst_teams or ()):
                check.require(
                    team in teams,
                    f"fleet.burst_teams[{i}]",
                    team,
                    f"must be one of the teams: {', '.join(teams) or 'none declared'}",
                )
        check.require(
            self.target == "onprem" or self.onprem_pricing is None,
            "onprem_pricing",
            self.onprem_pricing,
            "only for target onprem; AWS pools are priced from the price snapshot",
        )
        named = [b.team for b in self.budgets]
        for i, budget in enumerate(self.budgets):
            check.require(
                budget.team in teams,
                f"budgets[{i}].team",
                budget.team,
                f"must be one of the teams: {', '.join(teams) or 'none declared'}",
            )
            check.require(
                named.count(budget.team) == 1,
                f"budgets[{i}].team",
                budget.team,
                "one budget per team",
            )

    def _check_access_and_link(self, check: Checker) -> None:
        """Identity, the site link and the audit policy against the rest of the stack."""
        aws_only = (("identity", self.identity), ("site_link", self.site_link))
        for name, section in aws_only:
            check.require(
                self.target == "aws" or section is None,
                name,
                camel(name),
                "only for target aws (an EKS cluster in this stack's VPC)",
            )
        check.require(
            self.target == "onprem" or self.api_audit is None,
            "api_audit",
            "apiAudit",
            "only for target onprem: EKS keeps its audit log in CloudWatch",
        )
        if self.identity is not None:
            teams = tuple(t.name for t in self.teams)
            for key, value, expected in identity_problems(
                self.identity, teams, self.cluster.admin_role_arns
            ):
                check.require(False, key, value, expected)
        link = self.site_link
        if link is not None:
            check.require(
                self.fleet_worker is not None,
                "site_link",
                "siteLink",
                "a site link joins a fleet worker to its manager's site: declare fleetWorker",
            )
            for cidr in link.overlaps(self.network.vpc_cidr):
                check.require(
                    False,
                    "site_link.site_cidrs",
                    cidr,
                    f"overlaps the VPC ({self.network.vpc_cidr}): routes to the site would be "
                    "ambiguous",
                )

    def _check_pipelines(self, check: Checker) -> None:
        """Kubeflow Pipelines: its database is on the tracking server's; what the target
        needs of its section (`modules.k8s.pipelines.spec.placement_problems`)."""
        if not self.pipelines.enabled:
            return
        check.require(
            self.tracking.enabled,
            "pipelines.enabled",
            True,
            "Kubeflow Pipelines keeps its database on the tracking database server: "
            "needs tracking.enabled",
        )
        for name, value, expected in placement_problems(self.pipelines, self.target == "aws"):
            check.require(False, f"pipelines.{name}", value, expected)

    def _check_keys_and_backup(self, check: Checker) -> None:
        """Key custody and backups are AWS settings; they must fit this stack's VPC and
        region."""
        if self.target == "onprem":
            for name, value in (("keys", self.keys), ("backup", self.backup)):
                check.require(
                    value is None,
                    name,
                    "(given)",
                    "only for target aws (an onprem site holds its own keys and backups)",
                )
            return
        check.require(
            self.tracking.database_backup is None,
            "tracking.database_backup",
            "(given)",
            "only for target onprem (on AWS the tracking database is RDS, kept by its "
            "automated backups and the `backup` section's AWS Backup plan)",
        )
        store = self.keys.key_store if self.keys is not None else None
        if store is None:
            return
        if store.create_cluster:
            check.require(
                store.hsm_count <= self.network.zone_count,
                "keys.key_store.hsm_count",
                store.hsm_count,
                f"one HSM per zone: at most network.zoneCount ({self.network.zone_count})",
            )
        if store.type == "external" and store.proxy_vpc_endpoint_service_name:
            region = endpoint_service_region(store.proxy_vpc_endpoint_service_name)
            check.require(
                region in (None, self.region),
                "keys.key_store.proxy_vpc_endpoint_service_name",
                store.proxy_vpc_endpoint_service_name,
                f"the endpoint service must be in the stack's region {self.region}",
            )

    @property
    def key_custody(self) -> KeyCustodySpec:
        """The stack's key custody (standard when the section is unset)."""
        return self.keys or KeyCustodySpec()

    @property
    def backups(self) -> BackupSpec:
        """The stack's backup settings (the defaults when the section is unset)."""
        return self.backup or BackupSpec()

    @property
    def all_tags(self) -> dict[str, str]:
        """The stack's tags plus the residency tag every resource carries."""
        return {**self.tags, "residency": "uae"}


def _unquoted_version_hint(version: str) -> str:
    """YAML reads an unquoted ``1.30`` as the number 1.3 (and Pulumi passes it on as
    ``"1.3"``): where a version lost a trailing zero that way, say how to keep it."""
    if re.fullmatch(r"\d+\.\d", version):
        return (
            f" (an unquoted {version}0 is read by YAML as the number {version}: "
            f'quote it, kubernetesVersion: "{version}0")'
        )
    return ""


def _check_unique_names(check: Checker, field: str, names: list[str]) -> None:
    """One problem per repeated name, naming every entry that uses it by position."""
    for name in sorted({n for n in names if names.count(n) > 1}):
        positions = [i for i, n in enumerate(names) if n == name]
        others = " and ".join(f"{camel(field)}[{i}]" for i in positions[:-1])
        check.require(
            False,
            f"{field}[{positions[-1]}].name",
            name,
            f"{others} already use{'s' * (len(positions) == 2)} this name; names must be unique",
        )


def raw_sections(flat_config: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The project's keys of a Pulumi config map, structured values decoded.

    Pulumi passes every value as a string; objects, lists and ``null`` are JSON, and
    ``true``/``false`` the booleans. Keys of
    other namespaces (``aws:``, ``kubernetes:``) and the secret keys are left out.

    Returns:
        The sections by key, and a problem for each value that is not valid JSON.
    """
    prefix = f"{PROJECT}:"
    sections: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in flat_config.items():
        if not key.startswith(prefix) or key[len(prefix) :] in (
            *SECRET_KEYS,
            *KEY_STORE_SECRET_KEYS,
        ):
            continue
        text = str(value)
        if text[:1] in ("[", "{") or text == "null":
            try:
                sections[key[len(prefix) :]] = json.loads(text)
            except json.JSONDecodeError as err:
                problems.append(f"{key}: got {text[:40]!r}; not valid JSON ({err.msg})")
        elif text in ("true", "false"):
            # A YAML boolean (``requireImageDigests: true``) reaches the program as text.
            sections[key[len(prefix) :]] = text == "true"
        else:
            sections[key[len(prefix) :]] = text
    return sections, problems


def parse_stack_config(flat_config: Mapping[str, str]) -> StackConfig:
    """Parse and validate a stack's config map; raise `ConfigError` listing every problem."""
    sections, json_problems = raw_sections(flat_config)
    config, problems = parse_section(StackConfig, sections, f"{PROJECT}:")
    if config is None or json_problems:
        raise ConfigError(json_problems + problems)
    return config
