"""Security-relevant AWS resources of the uae-prod plan that no other test would miss if
they were dropped (found by `tests/tools/deletion_check.py`; see tests/README.md): flow
logs, the locked default security group, key aliases, bucket ownership, access logging
and lifecycle, the registry's lifecycle, EKS access entries and pod identities."""

from __future__ import annotations

import json

from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan

STACK = "uae-prod"
ACCOUNT = "123456789012"  # moto's account


def of_type(type_token: str) -> list[Registration]:
    registrations, _ = shipped_plan(STACK)
    return sorted((r for r in registrations.values() if r.type == type_token), key=lambda r: r.urn)


def test_vpc_flow_logs_capture_all_traffic_into_the_encrypted_group() -> None:
    (vpc,) = of_type("aws:ec2/vpc:Vpc")
    (flow_log,) = of_type("aws:ec2/flowLog:FlowLog")
    groups = {g.inputs["name"]: g for g in of_type("aws:cloudwatch/logGroup:LogGroup")}
    assert flow_log.inputs["vpcId"] == vpc.id
    assert flow_log.inputs["trafficType"] == "ALL"
    assert flow_log.inputs["logDestinationType"] == "cloud-watch-logs"
    group_name = flow_log.inputs["logDestination"].split(":log-group:", 1)[1]
    assert groups[group_name].inputs["retentionInDays"] == 365  # flowLogRetentionDays default
    roles = {r.id: r for r in of_type("aws:iam/role:Role")}  # a role's id is its name
    role_name = flow_log.inputs["iamRoleArn"].rsplit("/", 1)[1]
    trust = json.loads(roles[role_name].inputs["assumeRolePolicy"])["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "vpc-flow-logs.amazonaws.com"}]


def test_the_default_security_group_allows_nothing() -> None:
    (vpc,) = of_type("aws:ec2/vpc:Vpc")
    (default,) = of_type("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
    assert default.inputs["vpcId"] == vpc.id
    assert default.inputs.get("ingress", []) == [] and default.inputs.get("egress", []) == []


def test_every_key_has_its_alias() -> None:
    keys = {k.id: k.name.removeprefix("keys-") for k in of_type("aws:kms/key:Key")}
    aliases = {a.inputs["targetKeyId"]: a.inputs["name"] for a in of_type("aws:kms/alias:Alias")}
    assert aliases == {key_id: f"alias/gpu-{STACK}-{purpose}" for key_id, purpose in keys.items()}


def test_buckets_enforce_owner_and_log_access_and_expire_old_versions() -> None:
    buckets = {b.name: b.inputs["bucket"] for b in of_type("aws:s3/bucket:Bucket")}
    ownership = {
        o.inputs["bucket"]: o.inputs["rule"]["objectOwnership"]
        for o in of_type("aws:s3/bucketOwnershipControls:BucketOwnershipControls")
    }
    assert ownership == {name: "BucketOwnerEnforced" for name in buckets.values()}
    (logging,) = of_type("aws:s3/bucketLogging:BucketLogging")
    assert logging.inputs["bucket"] == buckets["data"]
    assert logging.inputs["targetBucket"] == buckets["data-logs"]
    lifecycle = {
        r.inputs["bucket"]: r.inputs["rules"]
        for r in of_type("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    }
    (data_rule,) = lifecycle[buckets["data"]]
    assert data_rule["status"] == "Enabled"
    assert data_rule["noncurrentVersionExpiration"] == {"noncurrentDays": 30}
    (log_rule,) = lifecycle[buckets["data-logs"]]
    assert log_rule["expiration"] == {"days": 365}  # accessLogRetentionDays default


def test_every_registry_is_immutable_scanned_and_expires_untagged_images() -> None:
    """The training registry and every serving image's repository (stacks/serving_foundation)."""
    repositories = {r.name: r for r in of_type("aws:ecr/repository:Repository")}
    assert "registry" in repositories and "registry-predictor" in repositories
    lifecycles = {lc.name: lc for lc in of_type("aws:ecr/lifecyclePolicy:LifecyclePolicy")}
    assert set(lifecycles) == set(repositories)
    for name, repository in repositories.items():
        assert repository.inputs["imageTagMutability"] == "IMMUTABLE", name
        (rule,) = json.loads(lifecycles[name].inputs["policy"])["rules"]
        assert rule["selection"]["tagStatus"] == "untagged", name
        assert rule["action"] == {"type": "expire"}, name


def test_cluster_access_is_the_listed_admins_the_teams_and_the_nodes_only() -> None:
    entries = {
        e.inputs["principalArn"]: e.inputs for e in of_type("aws:eks/accessEntry:AccessEntry")
    }
    admin = f"arn:aws:iam::{ACCOUNT}:role/platform-admin"  # the stack's adminRoleArns
    assert entries[admin]["type"] == "STANDARD" and "kubernetesGroups" not in entries[admin]
    nodes = [arn for arn, e in entries.items() if e["type"] == "EC2_LINUX"]
    # The teams' Identity Center roles (identity.teams; tests/aws/test_identity.py).
    teams = {arn for arn, e in entries.items() if "AWSReservedSSO_" in arn}
    assert len(nodes) == 1 and len(teams) == 3
    assert set(entries) == {admin, nodes[0], *teams}
    associations = of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    (cluster_wide,) = [a for a in associations if a.inputs["accessScope"]["type"] == "cluster"]
    assert cluster_wide.inputs["principalArn"] == admin
    assert cluster_wide.inputs["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert {a.inputs["principalArn"] for a in associations} == {admin, *teams}


def test_each_team_and_the_autoscaler_get_their_own_pod_identity() -> None:
    associations = {
        (a.inputs["namespace"], a.inputs["serviceAccount"]): a.inputs["roleArn"]
        for a in of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    teams = ("llm-research", "speech", "nlp")  # the stack's teams
    assert set(associations) == {
        *((f"team-{t}", "trainer") for t in teams),
        *((f"team-{t}", "inference") for t in teams),  # model serving, read-only models
        ("kube-system", "cluster-autoscaler"),
        ("mlflow", "mlflow"),  # the tracking server's artifacts
        ("spark-nlp", "spark-nlp"),  # team nlp's Spark job (tests/aws/test_spark_access.py)
        # Kubeflow Pipelines: API server, UI, the runs (tests/k8s/test_pipelines.py)
        ("kubeflow", "ml-pipeline"),
        ("kubeflow", "ml-pipeline-ui"),
        ("kubeflow", "pipeline-runner"),
    }
    assert len(set(associations.values())) == len(associations)  # no role is shared
    for team in teams:
        assert f"/training-{team}-" in associations[(f"team-{team}", "trainer")]


def test_both_buckets_are_versioned_and_refuse_plain_http() -> None:
    buckets = {b.inputs["bucket"] for b in of_type("aws:s3/bucket:Bucket")}
    versioning = {
        v.inputs["bucket"]: v.inputs["versioningConfiguration"]["status"]
        for v in of_type("aws:s3/bucketVersioning:BucketVersioning")
    }
    assert versioning == dict.fromkeys(buckets, "Enabled")
    policies = {
        p.inputs["bucket"]: json.loads(p.inputs["policy"])["Statement"]
        for p in of_type("aws:s3/bucketPolicy:BucketPolicy")
    }
    assert set(policies) == buckets
    for bucket, statements in policies.items():
        (deny,) = [s for s in statements if s.get("Sid") == "DenyInsecureTransport"]
        assert deny["Effect"] == "Deny" and deny["Condition"] == {
            "Bool": {"aws:SecureTransport": "false"}
        }, bucket


def test_endpoints_and_lustre_sit_in_their_own_security_groups() -> None:
    (vpc,) = of_type("aws:ec2/vpc:Vpc")
    cidr = vpc.inputs["cidrBlock"]
    groups = {g.name: g for g in of_type("aws:ec2/securityGroup:SecurityGroup")}
    assert set(groups) == {"network-endpoints", "shared-fs", "tracking-db"}
    assert all(g.inputs["vpcId"] == vpc.id for g in groups.values())
    endpoint_groups = {
        group
        for e in of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
        for group in e.inputs.get("securityGroupIds", [])
    }
    assert endpoint_groups == {groups["network-endpoints"].id}
    (fs,) = of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    lustre = groups["shared-fs"].id
    assert fs.inputs["securityGroupIds"] == [lustre]

    def ports(type_token: str) -> set[tuple[int, int, str]]:
        return {
            (r.inputs["fromPort"], r.inputs["toPort"], r.inputs["cidrIpv4"])
            for r in of_type(type_token)
            if r.inputs["securityGroupId"] == lustre
        }

    # Lustre: 988 and 1018-1023 in from the VPC, replies out to the VPC; nothing else.
    ingress = ports("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert ingress == {(988, 988, cidr), (1018, 1023, cidr)}
    egress = ports("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
    assert egress == {(1018, 1023, cidr)}
