"""Properties every AWS stack's plan must have: region-pinned providers, CMK encryption
from this stack's keys, private endpoint, IMDSv2, zones and EFA from the catalog,
protected stateful resources with stable URNs."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from moto import mock_aws

from stacks.offline_plan import build_plan
from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan

AWS_STACKS = ("uae-prod", "uae-dev", "smb-cpu")
REGION = "me-central-1"


def by_type(registrations: dict[str, Registration], type_token: str) -> list[Registration]:
    return sorted((r for r in registrations.values() if r.type == type_token), key=lambda r: r.urn)


def keys_of(registrations: dict[str, Registration]) -> set[str]:
    return {r.urn for r in by_type(registrations, "aws:kms/key:Key")}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_aws_resource_uses_the_region_pinned_provider(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    providers = by_type(registrations, "pulumi:providers:aws")
    assert [p.inputs["region"] for p in providers] == [REGION]
    pinned = providers[0].urn
    for reg in registrations.values():
        if reg.custom and not reg.type.startswith("pulumi:providers:"):
            assert reg.provider, f"{reg.urn} has no explicit provider"
            assert "default" not in reg.provider.split("::")[-2], reg.urn
            if reg.type.startswith("aws:"):
                assert reg.provider.rsplit("::", 1)[0] == pinned, reg.urn


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_storage_is_encrypted_with_this_stacks_keys(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    keys = keys_of(registrations)
    assert len(keys) == 3

    def from_stack_key(reg: Registration, prop: str) -> None:
        deps = set(reg.property_dependencies.get(prop, []))
        assert deps & keys, f"{reg.urn}.{prop} is not encrypted with a key of this stack"

    for reg in by_type(
        registrations,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    ):
        (rule,) = reg.inputs["rules"]
        assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
        assert rule["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"].startswith(
            f"arn:aws:kms:{REGION}:"
        )
        assert rule["bucketKeyEnabled"] is True
        from_stack_key(reg, "rules")
    buckets = by_type(registrations, "aws:s3/bucket:Bucket")
    encrypted = by_type(
        registrations,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    )
    assert len(buckets) == len(encrypted) == 2
    for reg in by_type(registrations, "aws:ec2/launchTemplate:LaunchTemplate"):
        ebs = reg.inputs["blockDeviceMappings"][0]["ebs"]
        assert ebs["encrypted"] == "true" and ebs["kmsKeyId"].startswith(f"arn:aws:kms:{REGION}:")
        from_stack_key(reg, "blockDeviceMappings")
    for reg in by_type(registrations, "aws:cloudwatch/logGroup:LogGroup"):
        from_stack_key(reg, "kmsKeyId")
    for reg in by_type(registrations, "aws:fsx/lustreFileSystem:LustreFileSystem"):
        from_stack_key(reg, "kmsKeyId")
    for reg in by_type(registrations, "aws:ecr/repository:Repository"):
        assert reg.inputs["encryptionConfigurations"][0]["encryptionType"] == "KMS"
        from_stack_key(reg, "encryptionConfigurations")
    (cluster,) = by_type(registrations, "aws:eks/cluster:Cluster")
    assert cluster.inputs["encryptionConfig"]["resources"] == ["secrets"]
    from_stack_key(cluster, "encryptionConfig")


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_keys_rotate_stay_in_region_and_are_protected(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    for key in by_type(registrations, "aws:kms/key:Key"):
        assert key.inputs["enableKeyRotation"] is True
        assert key.inputs["multiRegion"] is False
        assert key.inputs["deletionWindowInDays"] == 30
        assert key.protect
        for statement in json.loads(key.inputs["policy"])["Statement"]:
            assert statement["Principal"] != "*" and statement["Principal"].get("AWS") != "*"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_private_api_endpoint_and_all_control_plane_logs(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    (cluster,) = by_type(registrations, "aws:eks/cluster:Cluster")
    vpc = cluster.inputs["vpcConfig"]
    assert vpc["endpointPrivateAccess"] is True
    assert vpc["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in vpc
    assert sorted(cluster.inputs["enabledClusterLogTypes"]) == sorted(
        ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    )
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_launch_templates_require_imdsv2(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    for template in by_type(registrations, "aws:ec2/launchTemplate:LaunchTemplate"):
        metadata = template.inputs["metadataOptions"]
        assert metadata["httpTokens"] == "required"
        assert metadata["httpPutResponseHopLimit"] == 1


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_buckets_are_private_versioned_tls_only(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    blocks = by_type(registrations, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert len(blocks) == 2
    for block in blocks:
        assert all(
            block.inputs[k] is True
            for k in (
                "blockPublicAcls",
                "blockPublicPolicy",
                "ignorePublicAcls",
                "restrictPublicBuckets",
            )
        )
    for policy in by_type(registrations, "aws:s3/bucketPolicy:BucketPolicy"):
        statements = json.loads(policy.inputs["policy"])["Statement"]
        assert any(
            s["Sid"] == "DenyInsecureTransport" and s["Effect"] == "Deny" for s in statements
        )
    assert not by_type(registrations, "aws:s3/bucketReplicationConfig:BucketReplicationConfig")


def catalog_zones(instance_type: str) -> list[str]:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        offerings = ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
        )["InstanceTypeOfferings"]
        return sorted(o["Location"] for o in offerings)


def catalog_efa_interfaces(instance_type: str) -> int:
    with mock_aws():
        info = boto3.client("ec2", region_name=REGION).describe_instance_types(
            InstanceTypes=[instance_type]
        )
        return int(info["InstanceTypes"][0]["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"])


def node_group(
    registrations: dict[str, Registration], pool: str
) -> tuple[Registration, Registration, list[str]]:
    """The pool's node group, launch template and the zones of its subnets."""
    (group,) = [
        g for g in by_type(registrations, "aws:eks/nodeGroup:NodeGroup") if g.name == f"pool-{pool}"
    ]
    templates = {t.id: t for t in by_type(registrations, "aws:ec2/launchTemplate:LaunchTemplate")}
    subnets = {s.id: s for s in by_type(registrations, "aws:ec2/subnet:Subnet")}
    zones = sorted(subnets[s].inputs["availabilityZone"] for s in group.inputs["subnetIds"])
    return group, templates[group.inputs["launchTemplate"]["id"]], zones


def test_prod_gpu_pool_zone_efa_and_placement_come_from_the_catalog() -> None:
    registrations, _ = shipped_plan("uae-prod")
    group, template, zones = node_group(registrations, "h200")
    offered = catalog_zones("p5en.48xlarge")
    assert offered == ["me-central-1a", "me-central-1c"]
    assert zones == offered[:1]  # EFA: a single zone among those offering the type
    interfaces = template.inputs["networkInterfaces"]
    assert len(interfaces) == catalog_efa_interfaces("p5en.48xlarge") == 16
    assert interfaces[0] | {"securityGroups": None} == {
        "networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "efa",
        "deleteOnTermination": "true", "securityGroups": None,
    }  # fmt: skip
    assert {i["interfaceType"] for i in interfaces[1:]} == {"efa-only"}
    assert [i["networkCardIndex"] for i in interfaces] == list(range(16))
    assert template.inputs["placement"]["groupName"]
    assert group.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    assert group.inputs["scalingConfig"]["minSize"] == 0
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in group.inputs[
        "taints"
    ]


def test_prod_gpu_pool_can_scale_from_zero() -> None:
    registrations, _ = shipped_plan("uae-prod")
    tags = {
        t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
        for t in by_type(registrations, "aws:autoscaling/tag:Tag")
        if t.name.startswith("pool-h200-")
    }
    prefix = "k8s.io/cluster-autoscaler/node-template"
    assert tags["k8s.io/cluster-autoscaler/gpu-uae-prod"] == "owned"
    assert tags[f"{prefix}/resources/nvidia.com/gpu"] == "8"
    assert tags[f"{prefix}/resources/vpc.amazonaws.com/efa"] == "16"
    assert tags[f"{prefix}/taint/nvidia.com/gpu"] == "true:NoSchedule"
    assert tags[f"{prefix}/label/gpuplatform.ae/accelerator"] == "nvidia-h200"


def test_dev_gpu_pool_spans_every_vpc_zone_that_offers_it() -> None:
    registrations, _ = shipped_plan("uae-dev")
    _, template, zones = node_group(registrations, "l4")
    vpc_zones = sorted(
        s.inputs["availabilityZone"] for s in by_type(registrations, "aws:ec2/subnet:Subnet")
    )
    assert zones == sorted(set(catalog_zones("g6.xlarge")) & set(vpc_zones))
    assert "networkInterfaces" not in template.inputs
    assert "placement" not in template.inputs


def test_smb_stack_has_no_gpu_pool() -> None:
    registrations, _ = shipped_plan("smb-cpu")
    groups = by_type(registrations, "aws:eks/nodeGroup:NodeGroup")
    assert {g.inputs["amiType"] for g in groups} == {"AL2023_x86_64_STANDARD"}
    assert all(not g.inputs.get("taints") for g in groups)


# URNs of the resources that hold data or keys. A refactor that changes one of these
# would make Pulumi replace (delete) the resource: add an alias instead.
PROD_STATEFUL_URNS = sorted(
    f"urn:pulumi:uae-prod::uae-gpu-platform::{path}"
    for path in (
        "gpuplatform:aws:RegionalKeys$aws:kms/key:Key::keys-secrets",
        "gpuplatform:aws:RegionalKeys$aws:kms/key:Key::keys-storage",
        "gpuplatform:aws:RegionalKeys$aws:kms/key:Key::keys-logs",
        "gpuplatform:aws:DataStore$aws:s3/bucket:Bucket::data",
        "gpuplatform:aws:DataStore$aws:s3/bucket:Bucket::data-logs",
        "gpuplatform:aws:SharedFileSystem$aws:fsx/lustreFileSystem:LustreFileSystem::shared-fs",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry",
        "gpuplatform:aws:TrackingDatabase$aws:rds/instance:Instance::tracking-db",
        # The backup vault holds the recovery points (docs/recovery.md).
        "gpuplatform:aws:StackBackups$aws:backup/vault:Vault::backup",
        # The tracking server's image repositories (stacks/aws_foundation.py).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-tracking-mlflow",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-tracking-ghostunnel",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-tracking-busybox",
        # Kubeflow Trainer's controller and JobSet mirrored (stacks/aws_foundation.py).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-trainer-trainer-controller-manager",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-jobset-jobset",
        # The cluster add-ons' mirrored images (stacks/aws_foundation.py).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-autoscaling-cluster-autoscaler",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-opencost-opencost",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kueue-kueue",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-prometheus-operator-prometheus-operator",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-prometheus-operator-prometheus-config-reloader",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-jkroepke-kube-webhook-certgen",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-prometheus-prometheus",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-prometheus-alertmanager",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kube-state-metrics-kube-state-metrics",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-prometheus-node-exporter",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-grafana-grafana",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kiwigrid-k8s-sidecar",
        # The GPU Operator's (driver and toolkit come with the EKS GPU AMI; no MIG pool).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-nvidia-gpu-operator",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-nvidia-cuda",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-nvidia-k8s-device-plugin",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-nvidia-k8s-dcgm-exporter",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-nfd-node-feature-discovery",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-fsx-csi-driver-aws-fsx-csi-driver",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-csi-components-csi-provisioner",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-csi-components-csi-resizer",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-csi-components-livenessprobe",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-csi-components-csi-node-driver-registrar",
        # The LLM gateway's image repositories (stacks/aws_foundation.py).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-gateway-envoy-gateway",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-gateway-ratelimit",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-gateway-envoy",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-gateway-ai-gateway-controller",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-gateway-ai-gateway-extproc",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-gateway-valkey",
        # Model serving's image repositories (stacks/serving_foundation.py).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-predictor",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-tritonserver",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kube-rbac-proxy",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kserve-controller",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kserve-storage-initializer",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kserve-agent",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kserve-router",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-cert-manager-controller",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-cert-manager-webhook",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-cert-manager-cainjector",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-cert-manager-acmesolver",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-cert-manager-startupapicheck",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-metrics-server",
        # LLM serving's image repositories (stacks/llm_layer.py, docs/llm-cluster.md).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-d-cuda",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-d-router-endpoint-picker",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llm-d-uds-tokenizer",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-llmisvc-controller",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-vllm-cpu",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-keda",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-keda-metrics-apiserver",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-keda-admission-webhooks",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-http-add-on-operator",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-http-add-on-interceptor",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-http-add-on-scaler",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-lws",
        # The data image's repository (Spark, stacks/spark_layer.py).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-data",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-spark-operator-controller",
        # Kubeflow Pipelines' images mirrored into the stack's ECR, and the platform's
        # pipelines image (publisher, trigger; stacks/pipelines_layer.py).
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-alpine",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-argoexec",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-ghostunnel",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-kfp-api-server",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-kfp-driver",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-kfp-frontend",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-kfp-launcher",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-kfp-metadata-envoy",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-kfp-persistence-agent",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-kfp-scheduled-workflow-controller",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-ml_metadata_store_server",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-pgbouncer",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-postgresql",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-kubeflow-pipelines-workflow-controller",
        "gpuplatform:aws:ImageRegistry$aws:ecr/repository:Repository::registry-pipelines",
        "gpuplatform:aws:EksCluster$aws:cloudwatch/logGroup:LogGroup::cluster-control-plane",
        "gpuplatform:aws:Network$aws:cloudwatch/logGroup:LogGroup::network-flow-logs",
        # The site VPN's tunnel logs (siteLink, docs/fleet.md): network evidence.
        "gpuplatform:aws:SiteLink$aws:cloudwatch/logGroup:LogGroup::site-link-tunnels",
        "gpuplatform:k8s:Tenancy$kubernetes:core/v1:PersistentVolumeClaim::"
        "persistentvolumeclaim-team-llm-research-checkpoints",
        "gpuplatform:k8s:Tenancy$kubernetes:core/v1:PersistentVolumeClaim::"
        "persistentvolumeclaim-team-speech-checkpoints",
        # The team the onprem-ib site bursts here (fleetWorker, docs/fleet.md).
        "gpuplatform:k8s:Tenancy$kubernetes:core/v1:PersistentVolumeClaim::"
        "persistentvolumeclaim-team-nlp-checkpoints",
    )
)


def test_stateful_resources_are_protected_and_their_urns_are_stable() -> None:
    registrations, _ = shipped_plan("uae-prod")
    protected = sorted(r.urn for r in registrations.values() if r.protect)
    assert protected == PROD_STATEFUL_URNS


def test_plan_json_has_the_preview_shape_and_is_reproducible() -> None:
    _, document = shipped_plan("uae-prod")
    again = build_plan("uae-prod")
    assert json.dumps(again, sort_keys=True) == json.dumps(document, sort_keys=True)
    assert document["changeSummary"] == {"create": len(document["steps"])}
    first: dict[str, Any] = document["steps"][0]
    assert set(first) == {"op", "urn", "provider", "newState"}
    types = [s["newState"]["type"] for s in document["steps"]]
    assert types.index("pulumi:providers:aws") < types.index("aws:kms/key:Key")
    provider_urns = {
        s["urn"] for s in document["steps"] if s["newState"]["type"] == "pulumi:providers:aws"
    }
    for step in document["steps"]:
        state = step["newState"]
        if state["type"].startswith("aws:"):
            assert state["provider"].rsplit("::", 1)[0] in provider_urns
    assert document["config"]["uae-gpu-platform:region"] == "me-central-1"
