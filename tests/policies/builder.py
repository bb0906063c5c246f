"""Hand-made plan documents in the shape of ``pulumi preview --json``, for rule tests.

`PlanBuilder` writes steps the way the engine does (URNs with parent types, providers
as ``<urn>::<id>``, property dependencies); `compliant_plan` is a small but complete
sovereign stack that every mandatory rule accepts, which the tests then break one
property at a time.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

STACK = "test"
PROJECT = "uae-gpu-platform"
ACCOUNT = "123456789012"
REGION = "me-central-1"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
ECR = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
TAGS = {"owner": "ml-platform", "data-classification": "confidential", "residency": "uae"}


def key_arn(suffix: str, region: str = REGION) -> str:
    return f"arn:aws:kms:{region}:{ACCOUNT}:key/00000000-0000-4000-8000-{suffix:0>12}"


class PlanBuilder:
    """Accumulates steps; `document` returns the plan."""

    def __init__(self, stack: str = STACK, config: Mapping[str, Any] | None = None) -> None:
        self.stack = stack
        self.steps: list[dict[str, Any]] = []
        self.config = {f"{PROJECT}:region": REGION, f"{PROJECT}:target": "aws", **(config or {})}

    def urn(self, kind: str, name: str, parent_kind: str | None = None) -> str:
        qualified = f"{parent_kind}${kind}" if parent_kind else kind
        return f"urn:pulumi:{self.stack}::{PROJECT}::{qualified}::{name}"

    def add(
        self,
        kind: str,
        name: str,
        inputs: Mapping[str, Any],
        *,
        provider: str | None = None,
        deps: Mapping[str, list[str]] | None = None,
        custom: bool = True,
        op: str = "create",
        outputs: Mapping[str, Any] | None = None,
    ) -> str:
        urn = self.urn(kind, name)
        state: dict[str, Any] = {
            "urn": urn,
            "type": kind,
            "custom": custom,
            "inputs": dict(inputs),
            "dependencies": sorted({u for urns in (deps or {}).values() for u in urns}),
            "propertyDependencies": {k: list(v) for k, v in (deps or {}).items()},
        }
        if provider:
            state["provider"] = provider
        if outputs:
            state["outputs"] = dict(outputs)
        self.steps.append({"op": op, "urn": urn, "provider": provider or "", "newState": state})
        return urn

    def provider(self, package: str, name: str, inputs: Mapping[str, Any]) -> str:
        """Register a provider; returns the ``<urn>::<id>`` reference resources use."""
        urn = self.add(f"pulumi:providers:{package}", name, inputs)
        return f"{urn}::{name}-0000"

    def aws_provider(self, region: str = REGION, name: str | None = None) -> str:
        return self.provider(
            "aws",
            name or f"aws-{region}",
            {"region": region, "defaultTags": json.dumps({"tags": TAGS})},
        )

    def document(self) -> dict[str, Any]:
        return {
            "config": dict(self.config),
            "steps": copy.deepcopy(self.steps),
            "changeSummary": {"create": len(self.steps)},
        }


def secure_pod(image: str = f"{ECR}/trainer:1.4.2") -> dict[str, Any]:
    """A pod spec every workload rule accepts."""
    return {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "main",
                "image": image,
                "resources": {
                    "limits": {"cpu": "2", "memory": "4Gi"},
                    "requests": {"cpu": "1", "memory": "2Gi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "restartPolicy": "Never",
    }


def default_deny(namespace: str) -> dict[str, Any]:
    """A NetworkPolicy denying all ingress and egress of ``namespace``."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny-all", "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


def compliant_plan() -> dict[str, Any]:
    """A small sovereign stack: every mandatory rule passes on it."""
    b = PlanBuilder()
    aws = b.aws_provider()
    key = b.add(
        "aws:kms/key:Key",
        "storage-key",
        {"enableKeyRotation": True, "deletionWindowInDays": 30, "multiRegion": False},
        provider=aws,
        outputs={"arn": key_arn("1"), "keyId": "00000000-0000-4000-8000-000000000001"},
    )
    b.add(
        "aws:kms/alias:Alias",
        "storage-key",
        {"name": "alias/storage", "targetKeyId": key_arn("1")},
        provider=aws,
        deps={"targetKeyId": [key]},
    )
    bucket = b.add("aws:s3/bucket:Bucket", "data", {"bucket": "uae-data"}, provider=aws)
    b.add(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "data",
        {
            "bucket": "uae-data",
            "rules": [
                {
                    "applyServerSideEncryptionByDefault": {
                        "sseAlgorithm": "aws:kms",
                        "kmsMasterKeyId": key_arn("1"),
                    }
                }
            ],
        },
        provider=aws,
        deps={"bucket": [bucket], "rules": [key]},
    )
    b.add(
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        "data",
        {
            "bucket": "uae-data",
            "blockPublicAcls": True,
            "blockPublicPolicy": True,
            "ignorePublicAcls": True,
            "restrictPublicBuckets": True,
        },
        provider=aws,
        deps={"bucket": [bucket]},
    )
    tls_only = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": ["arn:aws:s3:::uae-data", "arn:aws:s3:::uae-data/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }
    b.add(
        "aws:s3/bucketPolicy:BucketPolicy",
        "data",
        {"bucket": "uae-data", "policy": json.dumps(tls_only)},
        provider=aws,
        deps={"bucket": [bucket]},
    )
    subnet = b.add(
        "aws:ec2/subnet:Subnet",
        "private-a",
        {
            "vpcId": "vpc-1",
            "cidrBlock": "10.0.0.0/20",
            "availabilityZone": f"{REGION}a",
            "mapPublicIpOnLaunch": False,
        },
        provider=aws,
    )
    b.add(
        "aws:ec2/securityGroup:SecurityGroup",
        "nodes",
        {
            "vpcId": "vpc-1",
            "ingress": [
                {"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["10.0.0.0/16"]}
            ],
        },
        provider=aws,
    )
    b.add(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        "nodes-https",
        {
            "securityGroupId": "sg-1",
            "cidrIpv4": "10.0.0.0/16",
            "ipProtocol": "tcp",
            "fromPort": 443,
            "toPort": 443,
        },
        provider=aws,
    )
    b.add(
        "aws:cloudwatch/logGroup:LogGroup",
        "cluster-logs",
        {"retentionInDays": 365, "kmsKeyId": key_arn("1")},
        provider=aws,
        deps={"kmsKeyId": [key]},
    )
    cluster = b.add(
        "aws:eks/cluster:Cluster",
        "cluster",
        {
            "roleArn": f"arn:aws:iam::{ACCOUNT}:role/cluster",
            "vpcConfig": {
                "endpointPrivateAccess": True,
                "endpointPublicAccess": False,
                "subnetIds": ["subnet-1"],
            },
            "encryptionConfig": {"provider": {"keyArn": key_arn("1")}, "resources": ["secrets"]},
        },
        provider=aws,
        deps={"encryptionConfig": [key], "vpcConfig": [subnet]},
    )
    template = b.add(
        "aws:ec2/launchTemplate:LaunchTemplate",
        "gpu",
        {
            "blockDeviceMappings": [
                {
                    "deviceName": "/dev/xvda",
                    "ebs": {"encrypted": "true", "kmsKeyId": key_arn("1"), "volumeSize": 500},
                }
            ],
            "metadataOptions": {
                "httpTokens": "required",
                "httpPutResponseHopLimit": 1,
                "httpEndpoint": "enabled",
            },
        },
        provider=aws,
        deps={"blockDeviceMappings": [key]},
    )
    b.add(
        "aws:eks/nodeGroup:NodeGroup",
        "gpu",
        {
            "clusterName": "gpu",
            "launchTemplate": {"id": "lt-1", "version": "1"},
            "subnetIds": ["subnet-1"],
            "nodeRoleArn": f"arn:aws:iam::{ACCOUNT}:role/node",
        },
        provider=aws,
        deps={"launchTemplate": [template], "subnetIds": [subnet], "clusterName": [cluster]},
    )
    b.add(
        "aws:ebs/volume:Volume",
        "scratch",
        {
            "availabilityZone": f"{REGION}a",
            "size": 100,
            "encrypted": True,
            "kmsKeyId": key_arn("1"),
        },
        provider=aws,
        deps={"kmsKeyId": [key]},
    )
    b.add(
        "aws:fsx/lustreFileSystem:LustreFileSystem",
        "shared",
        {
            "deploymentType": "PERSISTENT_2",
            "storageCapacity": 1200,
            "kmsKeyId": key_arn("1"),
            "subnetIds": ["subnet-1"],
        },
        provider=aws,
        deps={"kmsKeyId": [key], "subnetIds": [subnet]},
    )
    b.add(
        "aws:ecr/repository:Repository",
        "trainer",
        {
            "encryptionConfigurations": [{"encryptionType": "KMS", "kmsKey": key_arn("1")}],
            "imageTagMutability": "IMMUTABLE",
        },
        provider=aws,
        deps={"encryptionConfigurations": [key]},
    )
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
    role = b.add(
        "aws:iam/role:Role",
        "training-team-a",
        {"assumeRolePolicy": json.dumps(trust)},
        provider=aws,
    )
    scoped = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Resource": "arn:aws:s3:::uae-data/team-a/*",
            },
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": "arn:aws:s3:::uae-data",
                "Condition": {"StringLike": {"s3:prefix": ["team-a/*"]}},
            },
        ],
    }
    b.add(
        "aws:iam/rolePolicy:RolePolicy",
        "training-team-a-data",
        {"role": "training-team-a", "policy": json.dumps(scoped)},
        provider=aws,
        deps={"role": [role]},
    )
    k8s = b.provider(
        "kubernetes",
        "cluster",
        {
            "kubeconfig": {
                "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                "value": "apiVersion: v1",
            }
        },
    )
    b.add(
        "kubernetes:core/v1:ConfigMap",
        "site",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "gpuplatform-site", "namespace": "kube-system"},
            "data": {
                "site": "aws-me-central-1",
                "country": "AE",
                "kind": "aws-eks",
                "region": REGION,
            },
        },
        provider=k8s,
    )
    b.add(
        "kubernetes:core/v1:Namespace",
        "team-a",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
        provider=k8s,
    )
    b.add(
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        "team-a-default-deny-all",
        default_deny("team-a"),
        provider=k8s,
    )
    b.add(
        "kubernetes:batch/v1:Job",
        "train",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {"template": {"spec": secure_pod()}},
        },
        provider=k8s,
    )
    plugin_pod = secure_pod(f"{ECR}/k8s-device-plugin:v0.17.0")
    plugin_pod["volumes"] = [
        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}
    ]
    b.add(
        "kubernetes:apps/v1:DaemonSet",
        "nvidia-device-plugin",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": "nvidia-device-plugin",
                "namespace": "gpu-system",
                "annotations": {
                    "policy-exception.gpuplatform.ae/k8s-no-host-path": (
                        "device plugins register through the kubelet socket"
                    ),
                },
            },
            "spec": {
                "selector": {"matchLabels": {"app": "dp"}},
                "template": {"metadata": {"labels": {"app": "dp"}}, "spec": plugin_pod},
            },
        },
        provider=k8s,
    )
    b.add(
        "kubernetes:helm.sh/v3:Release",
        "kube-prometheus-stack",
        {
            "chart": "kube-prometheus-stack",
            "version": "75.6.0",
            "namespace": "monitoring",
            "repositoryOpts": {"repo": "https://prometheus-community.github.io/helm-charts"},
            "values": {
                "grafana": {
                    "image": {"registry": ECR, "repository": "grafana/grafana", "tag": "12.0.2"},
                    "service": {"type": "ClusterIP"},
                }
            },
        },
        provider=k8s,
    )
    return b.document()


def find_step(plan: Mapping[str, Any], kind: str, name: str) -> dict[str, Any]:
    """The newState of the step registering ``kind`` named ``name``."""
    for step in plan["steps"]:
        state = step["newState"]
        if state["type"] == kind and state["urn"].rsplit("::", 1)[-1] == name:
            return state  # type: ignore[no-any-return]
    raise KeyError(f"{kind} {name} is not in the plan")


def only_resource(
    kind: str,
    inputs: Mapping[str, Any],
    *,
    region: str = REGION,
    provider_inputs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A plan with one resource (and its provider), for single-rule tests."""
    b = PlanBuilder()
    package = kind.split(":", 1)[0]
    if package == "aws":
        ref = b.provider(
            "aws",
            "aws",
            provider_inputs
            if provider_inputs is not None
            else {"region": region, "defaultTags": json.dumps({"tags": TAGS})},
        )
    else:
        ref = b.provider("kubernetes", "k8s", provider_inputs or {})
    b.add(kind, "subject", inputs, provider=ref)
    return b.document()
