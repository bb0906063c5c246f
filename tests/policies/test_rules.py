"""Each rule on a compliant plan, a broken one and one with the property left out.

Every case starts from `compliant_plan` (on which no rule fails), changes one thing and
checks that exactly the expected rule fails, with a message naming the problem.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import documents
from policies.rules import ALL_RULES
from policies.settings import CONFIG_SCHEMAS
from tests.policies.builder import (
    ECR,
    PlanBuilder,
    compliant_plan,
    find_step,
    key_arn,
    only_resource,
)
from tests.policies.conftest import failing_rules, messages, review
from tests.policies.serving_cases import SERVING_CASES
from tests.policies.test_state_rule import residency, with_root_stack
from tests.policies.twins import twin_tests

Plan = dict[str, Any]

KEY = "aws:kms/key:Key"
BUCKET_SSE = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
)
PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
POLICY = "aws:s3/bucketPolicy:BucketPolicy"
JOB = "kubernetes:batch/v1:Job"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"
HELM = "kubernetes:helm.sh/v3:Release"


def inputs(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    return find_step(plan, kind, name)["inputs"]  # type: ignore[no-any-return]


def job_container(plan: Plan) -> dict[str, Any]:
    return inputs(plan, JOB, "train")["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def job_pod(plan: Plan) -> dict[str, Any]:
    return inputs(plan, JOB, "train")["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def set_in(kind: str, name: str, **values: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        inputs(plan, kind, name).update(values)

    return mutate


def drop(kind: str, name: str, key: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        del inputs(plan, kind, name)[key]

    return mutate


def add_resource(
    kind: str, name: str, props: dict[str, Any], package: str = "aws"
) -> Callable[[Plan], None]:
    """Add a resource registered through the plan's existing provider of ``package``."""

    def mutate(plan: Plan) -> None:
        provider = next(
            s["newState"]["urn"]
            for s in plan["steps"]
            if s["newState"]["type"] == f"pulumi:providers:{package}"
        )
        builder = PlanBuilder()
        builder.add(kind, name, props, provider=f"{provider}::id")
        plan["steps"].extend(builder.steps)

    return mutate


def _world_ingress(plan: Plan) -> None:
    inputs(plan, "aws:ec2/securityGroup:SecurityGroup", "nodes")["ingress"][0]["cidrBlocks"] = [
        "0.0.0.0/0"
    ]


def _admin_policy(plan: Plan) -> None:
    doc = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    add_resource("aws:iam/policy:Policy", "operators", {"policy": json.dumps(doc)})(plan)


def _training_policy(action: str, resource: str) -> Callable[[Plan], None]:
    """The training role's policy allowing only ``action`` on ``resource``."""
    doc = {"Statement": [{"Effect": "Allow", "Action": action, "Resource": resource}]}

    def mutate(plan: Plan) -> None:
        policy = inputs(plan, "aws:iam/rolePolicy:RolePolicy", "training-team-a-data")
        policy["policy"] = json.dumps(doc)

    return mutate


_bucket_wide_training = _training_policy("s3:GetObject", "arn:aws:s3:::uae-data/*")
_list_without_prefix = _training_policy("s3:ListBucket", "arn:aws:s3:::uae-data")


def _wildcard_trust(plan: Plan) -> None:
    doc = {
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]
    }
    inputs(plan, "aws:iam/role:Role", "training-team-a")["assumeRolePolicy"] = json.dumps(doc)


def _wildcard_key_policy(plan: Plan) -> None:
    doc = {
        "Statement": [
            {
                "Sid": "Everyone",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "kms:*",
                "Resource": "*",
            }
        ]
    }
    inputs(plan, KEY, "storage-key")["policy"] = json.dumps(doc)


def _site(**data: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        inputs(plan, "kubernetes:core/v1:ConfigMap", "site")["data"].update(data)

    return mutate


def _no_site(plan: Plan) -> None:
    plan["steps"] = [s for s in plan["steps"] if not s["urn"].endswith("ConfigMap::site")]


def _container(**security: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        job_container(plan)["securityContext"].update(security)

    return mutate


def _container_drop(key: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        del job_container(plan)["securityContext"][key]

    return mutate


def _pod(**values: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        job_pod(plan).update(values)

    return mutate


def _pod_security_drop(key: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        del job_pod(plan)["securityContext"][key]

    return mutate


def _image(image: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        job_container(plan)["image"] = image

    return mutate


TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"


def _train_job(image: str | None) -> Callable[[Plan], None]:
    """Add a Kubeflow Trainer TrainJob (its image replaces its runtime's trainer image)."""
    trainer: dict[str, Any] = {"numNodes": 2}
    if image is not None:
        trainer["image"] = image
    return add_resource(
        TRAINJOB,
        "tj",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": "team-a"},
            "spec": {"runtimeRef": {"name": "torch-h200-research"}, "trainer": trainer},
        },
        package="kubernetes",
    )


def _database_cluster(image: str) -> Callable[[Plan], None]:
    """Add a CloudNativePG Cluster (its operator runs every instance in ``imageName``)."""
    return add_resource(
        "kubernetes:postgresql.cnpg.io/v1:Cluster",
        "db",
        {
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "db", "namespace": "mlflow"},
            "spec": {"instances": 2, "imageName": image},
        },
        package="kubernetes",
    )


def _no_limits(plan: Plan) -> None:
    del job_container(plan)["resources"]["limits"]["memory"]


def _namespace(value: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        meta = inputs(plan, JOB, "train")["metadata"]
        if value is None:
            del meta["namespace"]
        else:
            meta["namespace"] = value

    return mutate


def _drop_exception(plan: Plan) -> None:
    inputs(plan, DAEMONSET, "nvidia-device-plugin")["metadata"]["annotations"].clear()


def _helm_values(values: dict[str, Any]) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        inputs(plan, HELM, "kube-prometheus-stack")["values"] = values

    return mutate


def _without(kind: str, name: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        plan["steps"] = [
            s
            for s in plan["steps"]
            if not (s["newState"]["type"] == kind and s["urn"].endswith(f"::{name}"))
        ]

    return mutate


def _tls_policy_allows(plan: Plan) -> None:
    doc = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::uae-data/*",
            }
        ]
    }
    inputs(plan, POLICY, "data")["policy"] = json.dumps(doc)


def _foreign_key_arn(plan: Plan) -> None:
    """The log group names a key no resource of the stack creates."""
    state = find_step(plan, "aws:cloudwatch/logGroup:LogGroup", "cluster-logs")
    state["inputs"]["kmsKeyId"] = key_arn("999")
    state["propertyDependencies"] = {}


def _default_tags(tags: dict[str, str]) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        provider = find_step(plan, "pulumi:providers:aws", "aws-me-central-1")
        provider["inputs"]["defaultTags"] = json.dumps({"tags": tags})

    return mutate


# (case id, mutation, the one rule that must fail, a fragment of its message)
CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    # residency
    (
        "secrets-provider-abroad",
        lambda p: with_root_stack(p, {"residency": residency("eu-west-1")}),
        "uae-state-and-secrets-in-region",
        "is in eu-west-1",
    ),
    (
        "region-foreign",
        set_in("aws:ec2/securityGroup:SecurityGroup", "nodes", region="eu-west-1"),
        "uae-aws-region-allowlist",
        "eu-west-1",
    ),
    (
        "provider-without-region",
        lambda p: find_step(p, "pulumi:providers:aws", "aws-me-central-1")["inputs"].pop("region"),
        "uae-aws-region-allowlist",
        "sets no region",
    ),
    (
        "global-iam-foreign-arn",
        lambda p: inputs(p, "aws:iam/rolePolicy:RolePolicy", "training-team-a-data").update(
            policy=json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": "kms:Decrypt",
                            "Resource": key_arn("1", "eu-west-1"),
                        }
                    ]
                }
            )
        ),
        "uae-global-service-content",
        "eu-west-1",
    ),
    (
        "ecr-replication-abroad",
        add_resource(
            "aws:ecr/replicationConfiguration:ReplicationConfiguration",
            "replication",
            {
                "replicationConfiguration": {
                    "rules": [
                        {"destinations": [{"region": "eu-west-1", "registryId": "123456789012"}]}
                    ]
                }
            },
        ),
        "uae-no-cross-region-copies",
        "eu-west-1",
    ),
    (
        "backup-copy-abroad",
        add_resource(
            "aws:backup/plan:Plan",
            "backup",
            {
                "rules": [
                    {
                        "ruleName": "daily",
                        "targetVaultName": "v",
                        "copyActions": [
                            {
                                "destinationVaultArn": (
                                    "arn:aws:backup:eu-central-1:123456789012:backup-vault:dr"
                                )
                            }
                        ],
                    }
                ]
            },
        ),
        "uae-backup-copies-in-region",
        "eu-central-1",
    ),
    (
        "dlm-copy-abroad",
        add_resource(
            "aws:dlm/lifecyclePolicy:LifecyclePolicy",
            "snapshots",
            {
                "policyDetails": {
                    "schedules": [
                        {
                            "name": "s",
                            "crossRegionCopyRules": [{"target": "us-east-1", "encrypted": True}],
                        }
                    ]
                }
            },
        ),
        "uae-no-cross-region-copies",
        "us-east-1",
    ),
    (
        "snapshot-copy-from-abroad",
        add_resource(
            "aws:ebs/snapshotCopy:SnapshotCopy",
            "copy",
            {
                "sourceRegion": "eu-west-1",
                "sourceSnapshotId": "snap-1",
                "encrypted": True,
                "kmsKeyId": key_arn("1"),
            },
        ),
        "uae-no-cross-region-copies",
        "eu-west-1",
    ),
    (
        "dynamodb-replica-abroad",
        add_resource(
            "aws:dynamodb/table:Table",
            "t",
            {"hashKey": "id", "replicas": [{"regionName": "eu-west-1"}]},
        ),
        "uae-no-cross-region-copies",
        "eu-west-1",
    ),
    (
        "multi-region-key",
        set_in(KEY, "storage-key", multiRegion=True),
        "uae-kms-no-multi-region",
        "multiRegion",
    ),
    (
        "replica-key",
        add_resource(
            "aws:kms/replicaKey:ReplicaKey",
            "replica",
            {"primaryKeyArn": key_arn("1"), "deletionWindowInDays": 30},
        ),
        "uae-kms-no-multi-region",
        "replica",
    ),
    ("image-docker-hub", _image("python:3.11-slim"), "uae-container-image-registry", "docker.io"),
    (
        "trainjob-image-docker-hub",
        _train_job("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"),
        "uae-container-image-registry",
        "`spec.trainer.image` pulls pytorch/pytorch",
    ),
    (
        "database-image-ghcr",
        _database_cluster("ghcr.io/cloudnative-pg/postgresql:17.6"),
        "uae-container-image-registry",
        "`spec.imageName` pulls ghcr.io/cloudnative-pg/postgresql:17.6 from ghcr.io",
    ),
    (
        "image-foreign-ecr",
        _image("123456789012.dkr.ecr.eu-west-1.amazonaws.com/trainer:1.0"),
        "uae-container-image-registry",
        "eu-west-1",
    ),
    (
        "helm-public-image",
        _helm_values(
            {"grafana": {"image": {"registry": "docker.io", "repository": "grafana/grafana"}}}
        ),
        "uae-helm-chart-images",
        "docker.io/grafana/grafana",
    ),
    (
        "helm-public-image-map",
        _helm_values({"images": {"operator": "ghcr.io/kedacore/http-add-on-operator"}}),
        "uae-helm-chart-images",
        "`values.images.operator` pulls ghcr.io/kedacore/http-add-on-operator",
    ),
    (
        "helm-public-image-map-name",
        _helm_values({"images": {"kubeRbacProxy": {"name": "gcr.io/kubebuilder/kube-rbac-proxy"}}}),
        "uae-helm-chart-images",
        "`values.images.kubeRbacProxy` pulls gcr.io/kubebuilder/kube-rbac-proxy",
    ),
    (
        "helm-public-global-registry",
        _helm_values({"global": {"imageRegistry": "quay.io"}}),
        "uae-helm-chart-images",
        "`values.global.imageRegistry` pulls quay.io",
    ),
    (
        "helm-no-image-values",
        _helm_values({"grafana": {"service": {"type": "ClusterIP"}}}),
        "uae-helm-chart-images",
        "cannot be checked",
    ),
    ("site-foreign-country", _site(country="DE"), "uae-k8s-site-declaration", "'DE'"),
    ("site-foreign-region", _site(region="eu-west-1"), "uae-k8s-site-declaration", "eu-west-1"),
    ("site-missing", _no_site, "uae-k8s-site-declaration", "gpuplatform-site"),
    # encryption
    (
        "volume-unencrypted",
        set_in("aws:ebs/volume:Volume", "scratch", encrypted=False),
        "aws-encryption-customer-managed-key",
        "encrypted",
    ),
    (
        "volume-no-key",
        drop("aws:ebs/volume:Volume", "scratch", "kmsKeyId"),
        "aws-encryption-customer-managed-key",
        "kmsKeyId",
    ),
    (
        "bucket-aes256",
        lambda p: inputs(p, BUCKET_SSE, "data").update(
            rules=[{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}]
        ),
        "aws-encryption-customer-managed-key",
        "AES256",
    ),
    (
        "log-group-aws-key",
        set_in("aws:cloudwatch/logGroup:LogGroup", "cluster-logs", kmsKeyId="alias/aws/logs"),
        "aws-encryption-customer-managed-key",
        "AWS-managed",
    ),
    (
        "eks-no-secrets-encryption",
        drop("aws:eks/cluster:Cluster", "cluster", "encryptionConfig"),
        "aws-encryption-customer-managed-key",
        "secrets",
    ),
    (
        "ecr-aes",
        set_in(
            "aws:ecr/repository:Repository",
            "trainer",
            encryptionConfigurations=[{"encryptionType": "AES256"}],
        ),
        "aws-encryption-customer-managed-key",
        "AES256",
    ),
    (
        "fsx-scratch",
        set_in("aws:fsx/lustreFileSystem:LustreFileSystem", "shared", deploymentType="SCRATCH_2"),
        "aws-encryption-customer-managed-key",
        "SCRATCH_2",
    ),
    (
        "launch-template-no-disks",
        drop("aws:ec2/launchTemplate:LaunchTemplate", "gpu", "blockDeviceMappings"),
        "aws-encryption-customer-managed-key",
        "blockDeviceMappings",
    ),
    (
        "node-group-no-template",
        drop("aws:eks/nodeGroup:NodeGroup", "gpu", "launchTemplate"),
        "aws-encryption-customer-managed-key",
        "launch template",
    ),
    (
        "key-rotation-off",
        drop(KEY, "storage-key", "enableKeyRotation"),
        "aws-kms-key-rotation",
        "enableKeyRotation",
    ),
    (
        "key-deletion-window-unset",
        drop(KEY, "storage-key", "deletionWindowInDays"),
        "aws-kms-deletion-window",
        "not set",
    ),
    (
        "key-policy-wildcard",
        _wildcard_key_policy,
        "aws-kms-policy-no-wildcard-principal",
        "Everyone",
    ),
    ("key-not-from-stack", _foreign_key_arn, "uae-kms-key-from-stack", "does not create"),
    # exposure
    (
        "eks-public-endpoint",
        lambda p: inputs(p, "aws:eks/cluster:Cluster", "cluster")["vpcConfig"].update(
            endpointPublicAccess=True
        ),
        "aws-eks-endpoint-private",
        "whole internet",
    ),
    (
        "eks-endpoint-unset",
        lambda p: inputs(p, "aws:eks/cluster:Cluster", "cluster")["vpcConfig"].pop(
            "endpointPublicAccess"
        ),
        "aws-eks-endpoint-private",
        "whole internet",
    ),
    ("sg-world-ingress", _world_ingress, "aws-no-world-ingress", "0.0.0.0/0"),
    (
        "sg-rule-world-ingress",
        set_in(
            "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
            "nodes-https",
            cidrIpv4="0.0.0.0/0",
        ),
        "aws-no-world-ingress",
        "0.0.0.0/0",
    ),
    (
        "pab-off",
        set_in(PAB, "data", blockPublicPolicy=False),
        "aws-s3-public-access-block",
        "blockPublicPolicy",
    ),
    (
        "pab-missing-setting",
        drop(PAB, "data", "restrictPublicBuckets"),
        "aws-s3-public-access-block",
        "restrictPublicBuckets",
    ),
    (
        "subnet-public-ips",
        set_in("aws:ec2/subnet:Subnet", "private-a", mapPublicIpOnLaunch=True),
        "aws-no-public-ip-on-nodes",
        "mapPublicIpOnLaunch",
    ),
    (
        "imds-optional",
        lambda p: inputs(p, "aws:ec2/launchTemplate:LaunchTemplate", "gpu")[
            "metadataOptions"
        ].update(httpTokens="optional"),
        "aws-imdsv2-required",
        "optional",
    ),
    (
        "imds-missing",
        drop("aws:ec2/launchTemplate:LaunchTemplate", "gpu", "metadataOptions"),
        "aws-imdsv2-required",
        "IMDSv1",
    ),
    (
        "imds-hops",
        lambda p: inputs(p, "aws:ec2/launchTemplate:LaunchTemplate", "gpu")[
            "metadataOptions"
        ].update(httpPutResponseHopLimit=3),
        "aws-imdsv2-required",
        "above 2",
    ),
    (
        "grafana-public-lb",
        _helm_values(
            {
                "grafana": {
                    "image": {"registry": ECR, "repository": "grafana/grafana"},
                    "service": {"type": "LoadBalancer"},
                }
            }
        ),
        "k8s-monitoring-not-public",
        "LoadBalancer",
    ),
    (
        "prometheus-service-lb",
        add_resource(
            "kubernetes:core/v1:Service",
            "prometheus",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "prometheus", "namespace": "monitoring"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 9090}]},
            },
            "kubernetes",
        ),
        "k8s-monitoring-not-public",
        "internet-facing",
    ),
    # identity
    ("iam-admin", _admin_policy, "aws-iam-no-admin-wildcard", "`*` on `*`"),
    ("iam-trust-wildcard", _wildcard_trust, "aws-iam-trust-no-wildcard-principal", "any principal"),
    ("training-bucket-wide", _bucket_wide_training, "aws-iam-training-role-scoped", "uae-data/*"),
    (
        "training-list-without-prefix",
        _list_without_prefix,
        "aws-iam-training-role-scoped",
        "s3:prefix",
    ),
    # kubernetes
    ("privileged", _container(privileged=True), "k8s-no-privileged", "privileged"),
    ("host-network", _pod(hostNetwork=True), "k8s-no-host-namespaces", "hostNetwork"),
    ("host-path-without-exception", _drop_exception, "k8s-no-host-path", "/var/lib/kubelet"),
    (
        "privilege-escalation",
        _container(allowPrivilegeEscalation=True),
        "k8s-no-privilege-escalation",
        "allowPrivilegeEscalation",
    ),
    (
        "privilege-escalation-unset",
        _container_drop("allowPrivilegeEscalation"),
        "k8s-no-privilege-escalation",
        "allowPrivilegeEscalation",
    ),
    ("root-user", _container(runAsUser=0), "k8s-run-as-non-root", "UID 0"),
    (
        "run-as-non-root-unset",
        _pod_security_drop("runAsNonRoot"),
        "k8s-run-as-non-root",
        "runAsNonRoot",
    ),
    ("no-memory-limit", _no_limits, "k8s-resource-limits", "memory"),
    ("latest-tag", _image(f"{ECR}/trainer:latest"), "k8s-no-latest-tag", "latest"),
    (
        "trainjob-latest-tag",
        _train_job(f"{ECR}/trainer:latest"),
        "k8s-no-latest-tag",
        "spec.trainer.image",
    ),
    ("untagged-image", _image(f"{ECR}/trainer"), "k8s-no-latest-tag", "latest"),
    (
        "writable-root",
        _container(readOnlyRootFilesystem=False),
        "k8s-read-only-root-filesystem",
        "writable",
    ),
    (
        "seccomp-unset",
        _pod_security_drop("seccompProfile"),
        "k8s-seccomp-runtime-default",
        "Unconfined",
    ),
    ("default-namespace", _namespace("default"), "k8s-no-default-namespace", "default"),
    ("namespace-unset", _namespace(None), "k8s-no-default-namespace", "default"),
    # tags
    (
        "tag-missing",
        _default_tags({"owner": "ml-platform", "data-classification": "confidential"}),
        "aws-required-tags",
        "residency",
    ),
    (
        "tag-empty",
        _default_tags({"owner": "", "data-classification": "confidential", "residency": "uae"}),
        "aws-required-tags",
        "owner",
    ),
    # stack
    (
        "bucket-without-sse",
        _without(BUCKET_SSE, "data"),
        "aws-s3-bucket-encryption-config",
        "server-side encryption",
    ),
    (
        "bucket-without-pab",
        _without(PAB, "data"),
        "aws-s3-bucket-public-access-block",
        "public access block",
    ),
    ("bucket-without-policy", _without(POLICY, "data"), "aws-s3-bucket-tls-only", "TLS-only"),
    ("bucket-policy-not-tls", _tls_policy_allows, "aws-s3-bucket-tls-only", "TLS-only"),
    (
        "replication-outside-stack",
        add_resource(
            "aws:s3/bucketReplicationConfig:BucketReplicationConfig",
            "replication",
            {
                "bucket": "uae-data",
                "role": "arn:aws:iam::123456789012:role/r",
                "rules": [
                    {
                        "status": "Enabled",
                        "destination": {"bucket": "arn:aws:s3:::replica-eu-west-1"},
                    }
                ],
            },
        ),
        "uae-s3-replication-in-region",
        "replica-eu-west-1",
    ),
]


# Model serving (KServe) cases live beside their objects' builder.
CASES += SERVING_CASES


test_the_compliant_plan_passes_every_rule, test_the_broken_plan_fails_exactly_the_rule = twin_tests(
    compliant_plan, CASES
)


@pytest.mark.parametrize("image", [f"{ECR}/training:0.1.0", None], ids=["ecr", "runtime"])
def test_a_trainjob_with_an_in_region_image_or_its_runtimes_passes(image: str | None) -> None:
    plan = compliant_plan()
    _train_job(image)(plan)
    assert failing_rules(plan) == set()


def test_every_rule_has_a_failing_case() -> None:
    # The database rules' cases live with their compliant plan (test_database_rules).
    from tests.policies.test_access_and_link_rules import (  # noqa: PLC0415
        COVERED_RULE_IDS as ACCESS_AND_LINK,
    )
    from tests.policies.test_custody_backup_rules import (  # noqa: PLC0415
        BACKUP_CASES,
        CUSTODY_CASES,
    )
    from tests.policies.test_database_backup_rules import (  # noqa: PLC0415
        COVERED_RULE_IDS as DATABASE_BACKUPS,
    )
    from tests.policies.test_database_rules import CASES as DATABASE_CASES  # noqa: PLC0415
    from tests.policies.test_features_rules import CASES as FEATURES_CASES  # noqa: PLC0415
    from tests.policies.test_fleet_rules import COVERED_RULE_IDS  # noqa: PLC0415
    from tests.policies.test_gateway_rules import CASES as GATEWAY_CASES  # noqa: PLC0415
    from tests.policies.test_llm_rules import CASES as LLM_CASES  # noqa: PLC0415
    from tests.policies.test_pipelines_rules import CASES as PIPELINES_CASES  # noqa: PLC0415
    from tests.policies.test_segmentation_rules import (  # noqa: PLC0415
        COVERED_RULE_IDS as SEGMENTATION,
    )
    from tests.policies.test_spark_rules import CASES as SPARK_CASES  # noqa: PLC0415

    covered = (
        {
            c[2]
            for c in (
                *CASES,
                *DATABASE_CASES,
                *BACKUP_CASES,
                *CUSTODY_CASES,
                *FEATURES_CASES,
                *SPARK_CASES,
                *PIPELINES_CASES,
                *GATEWAY_CASES,
                *LLM_CASES,
            )
        }
        | COVERED_RULE_IDS
        | ACCESS_AND_LINK
        | SEGMENTATION
        | DATABASE_BACKUPS
    )
    assert {r.id for r in ALL_RULES} - covered == set()


def test_every_rule_carries_its_metadata() -> None:
    for rule in ALL_RULES:
        assert rule.id.startswith(("uae-", "aws-", "k8s-")), rule.id
        assert rule.description and rule.remediation, rule.id
        assert any("ISO/IEC 27001:2022" in c for c in rule.controls), rule.id
    residency = [r for r in ALL_RULES if r.id.startswith("uae-")]
    assert all(any("PDPL" in c for c in r.controls) for r in residency)


def test_the_compliance_page_lists_every_rule_and_config_key() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "compliance.md").read_text()
    assert [r.id for r in ALL_RULES if f"`{r.id}`" not in page] == []
    assert [k for k in CONFIG_SCHEMAS if f"`{k}`" not in page] == []


def test_rule_modules_share_document_helpers_through_one_module() -> None:
    """The policy-document helpers are defined once (policies/documents.py) and rule
    modules import them from there, not from each other."""
    helpers = ("statements", "wildcard_principal", "_star", "names_everything")
    rules_dir = Path(__file__).resolve().parents[2] / "policies" / "rules"
    cross_imports, definitions = [], []
    for module in sorted(rules_dir.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("policies.rules")
                and any(alias.name in helpers for alias in node.names)
            ):
                cross_imports.append(f"{module.name}: from {node.module}")
            if isinstance(node, ast.FunctionDef) and node.name in helpers:
                definitions.append(f"{module.name}: {node.name}")
    assert cross_imports == []
    assert definitions == []
    assert callable(documents.statements) and callable(documents.wildcard_principal)
    assert documents.names_everything(["s3:GetObject", "*"])
    assert not documents.names_everything("s3:*")


NOT_JSON = "{not json"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's unknown-string sentinel
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE = "aws:iam/role:Role"


DOCUMENTS = [
    (
        ROLE_POLICY,
        "training-team-a-data",
        "policy",
        {"aws-iam-no-admin-wildcard", "aws-iam-training-role-scoped"},
    ),
    (ROLE, "training-team-a", "assumeRolePolicy", {"aws-iam-trust-no-wildcard-principal"}),
    (KEY, "storage-key", "policy", {"aws-kms-policy-no-wildcard-principal"}),
    (POLICY, "data", "policy", {"aws-s3-bucket-tls-only"}),
]


@pytest.mark.parametrize("target", DOCUMENTS, ids=[f"{d[1]}.{d[2]}" for d in DOCUMENTS])
@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (NOT_JSON, "policy document is not valid JSON"),
        ("", "policy document is not valid JSON"),
        ('["Statement"]', "policy document is not a JSON object"),
    ],
    ids=["broken", "empty", "array"],
)
def test_a_policy_document_that_is_not_json_is_a_violation(
    target: tuple[str, str, str, set[str]], document: str, problem: str
) -> None:
    kind, name, key, expected_rules = target
    plan = compliant_plan()
    inputs(plan, kind, name)[key] = document
    assert failing_rules(plan) == expected_rules
    for rule_id in expected_rules:
        assert any(problem in m for m in messages(plan, rule_id)), messages(plan, rule_id)


@pytest.mark.parametrize(
    ("kind", "name", "key"),
    [
        (ROLE_POLICY, "training-team-a-data", "policy"),
        (ROLE, "training-team-a", "assumeRolePolicy"),
        (KEY, "storage-key", "policy"),
    ],
)
def test_an_unknown_policy_document_cannot_be_checked_during_preview(
    kind: str, name: str, key: str
) -> None:
    plan = compliant_plan()
    inputs(plan, kind, name)[key] = UNKNOWN
    result = review(plan)
    assert result.violations == []
    unknown = [f.message for f in result.findings if f.unknown]
    assert unknown and all("cannot be checked during preview" in m for m in unknown)


def test_a_hidden_secret_policy_document_cannot_be_checked_offline() -> None:
    plan = compliant_plan()
    inputs(plan, ROLE_POLICY, "training-team-a-data")["policy"] = {
        "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"
    }
    result = review(plan)
    assert result.violations == []
    assert {f.rule_id for f in result.findings if f.unknown} == {
        "aws-iam-no-admin-wildcard",
        "aws-iam-training-role-scoped",
    }
    assert all("hidden" in f.message for f in result.findings if f.unknown)


def test_a_crds_schema_is_no_workload() -> None:
    """A CustomResourceDefinition runs nothing: a pod spec in its schema (a default) is
    not judged by the pod rules, while the same spec in a workload is."""
    pod = {"containers": [{"name": "x", "image": "busybox:latest"}], "hostNetwork": True}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobs.example.com"},
        "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"default": pod}}}]},
    }
    crd_type = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
    assert {r for r in failing_rules(only_resource(crd_type, crd)) if r.startswith("k8s-")} == set()
    job = {**crd, "kind": "Job", "metadata": {"name": "j", "namespace": "team-a"}}
    found = failing_rules(only_resource("kubernetes:batch/v1:Job", job))
    assert {"k8s-no-host-namespaces", "k8s-no-latest-tag"} <= found
