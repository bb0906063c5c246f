"""A team's Spark role is least privilege: its raw files listed and read only, its
datasets listed and written (never read back or deleted), its event logs written only
(never listed, read back or deleted), single PUTs only (no multipart actions: the job
never uploads in parts), the stack's key only through S3 in the region; the shipped
stacks bind exactly ``spark-<team>/spark-<team>`` (the team's own Spark namespace and
ServiceAccount) to it through Pod Identity, and give the data image its own ECR
repository under the stack's key. (The project has no IAM policy simulator, so the
document's statements are read directly; moto's IAM checks the document is valid, here
and for every shipped role in test_iam_documents.py.)"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from modules.aws.spark_access import spark_data_access
from modules.k8s.spark import spec as ss
from tests.conftest import shipped_plan

BUCKET = "arn:aws:s3:::gpu-test-data-123456789012"
KEY = "arn:aws:kms:me-central-1:123456789012:key/00000000-0000-4000-8000-000000000001"
SPARK_STACKS = {"smb-cpu": ("analytics",), "uae-prod": ("nlp",)}


def document(team: str = "nlp") -> dict[str, Any]:
    return spark_data_access(
        BUCKET,
        KEY,
        "me-central-1",
        raw_prefix=ss.raw_prefix(team),
        datasets_prefix=ss.datasets_prefix(team),
        event_log_prefix=ss.event_log_prefix(team),
    )


def grants(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (action, resource) pair the document allows."""
    pairs = set()
    for statement in doc["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"]
        resources = statement["Resource"]
        for action in [actions] if isinstance(actions, str) else actions:
            for resource in [resources] if isinstance(resources, str) else resources:
                pairs.add((action, resource))
    return pairs


def test_the_role_reaches_only_the_teams_prefixes_and_the_storage_key() -> None:
    raw, datasets, logs = (
        f"{BUCKET}/teams/nlp/raw/*",
        f"{BUCKET}/teams/nlp/datasets/*",
        f"{BUCKET}/spark-events/nlp/*",
    )
    # Exactly what workloads/data/object_store.py calls: list_objects_v2 (raw files, and
    # the dataset's prefix to refuse an existing dataset), get_object (raw files),
    # put_object (dataset files and event logs; one PUT each, If-None-Match).
    assert grants(document()) == {
        ("s3:ListBucket", BUCKET),
        ("s3:GetObject", raw),
        ("s3:PutObject", datasets),
        ("s3:PutObject", logs),
        ("kms:Decrypt", KEY),
        ("kms:GenerateDataKey", KEY),
    }


#: The IAM action each S3 operation the data job may send needs.
ACTION_OF = {"list_objects_v2": "s3:ListBucket", "get_object": "s3:GetObject",
             "put_object": "s3:PutObject"}  # fmt: skip
DATA_JOB = Path(__file__).resolve().parents[2] / "workloads" / "data"


def s3_client_methods() -> set[str]:
    """Every public method of boto3's S3 client: the operations of the service model
    (snake case) and the helpers boto3 adds (upload_file, copy, get_paginator, ...)."""
    client = boto3.client("s3", region_name="me-central-1")
    public = {m for m in dir(client) if not m.startswith("_") and callable(getattr(client, m))}
    # close (the connection pool) and can_paginate send nothing; files close too.
    return public - {"close", "can_paginate"}


def modules() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in DATA_JOB.rglob("*.py")}


def test_object_store_builds_the_jobs_only_client() -> None:
    """boto3 is imported by object_store.py alone, which builds one client, for S3 (no
    resource, no second client): every S3 call of the job goes through that client."""
    importers = set()
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names]
                if any(n.split(".")[0] == "boto3" or n == "botocore.session" for n in names):
                    importers.add(name)
                if isinstance(node, ast.ImportFrom) and node.module == "botocore":
                    assert {a.name for a in node.names} <= {"exceptions"}, name
    assert importers == {"object_store.py"}
    built = sorted(
        (node.func.attr, [a.value for a in node.args if isinstance(a, ast.Constant)])
        for node in ast.walk(modules()["object_store.py"])
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"client", "resource", "Session", "create_client"}
    )
    assert built == [("Session", []), ("client", ["s3"])]


def test_the_job_calls_only_what_the_role_grants() -> None:
    """Every call in workloads/data of a method S3's client has, on any receiver or
    through getattr, is one of the three the role is cut for: a new call (a multipart
    upload, a read back of the dataset, a delete) fails here before it fails on AWS."""
    methods = s3_client_methods()
    calls: dict[str, list[list[object]]] = {}
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in methods:
                # object_store's own functions (its list_objects) are read in its file.
                if isinstance(func.value, ast.Name) and func.value.id == "object_store":
                    continue
                called = func.attr
            elif (
                isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in methods
            ):
                called = str(node.args[1].value)
            else:
                continue
            args: list[object] = [a.value for a in node.args if isinstance(a, ast.Constant)]
            calls.setdefault(called, []).append(args)
            assert name == "object_store.py", f"{name} calls S3's {called} itself"
    assert set(calls) == {"get_paginator", "get_object", "put_object"}, calls
    assert calls["get_paginator"] == [["list_objects_v2"]]
    operations = {"list_objects_v2", "get_object", "put_object"}
    assert {ACTION_OF[o] for o in operations} == {
        a for a, _ in grants(document()) if a.startswith("s3:")
    }


def test_listing_and_the_key_are_fenced_by_conditions() -> None:
    by_sid = {s["Sid"]: s for s in document()["Statement"]}
    assert by_sid["ListOwnPrefixes"]["Condition"] == {
        "StringLike": {
            "s3:prefix": [
                "teams/nlp/raw/",
                "teams/nlp/raw/*",
                "teams/nlp/datasets/",
                "teams/nlp/datasets/*",
            ]
        }
    }
    assert by_sid["UseStorageKeyThroughS3"]["Condition"] == {
        "StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}
    }


def test_nothing_of_the_team_can_be_deleted_and_no_other_team_is_reached() -> None:
    pairs = grants(document("nlp"))
    assert not [r for a, r in pairs if a == "s3:DeleteObject"]  # event logs included
    assert not any("teams/vision" in r or r.endswith("teams/*") for _, r in pairs)
    assert not any(r in ("*", f"{BUCKET}/*") for _, r in pairs)
    assert not any(a.endswith("*") for a, _ in pairs)
    # Another team's document grants nothing of this team's.
    assert not {r for _, r in grants(document("vision"))} & {
        r for _, r in pairs if "/teams/" in r or "/spark-events/" in r
    }


def test_iam_accepts_the_document() -> None:
    with mock_aws():
        client = boto3.client("iam", region_name="us-east-1")
        client.create_policy(PolicyName="spark", PolicyDocument=json.dumps(document()))


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_each_team_with_a_job_gets_its_role_bound_to_its_service_account(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    associations = [
        r.inputs
        for r in registrations.values()
        if r.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
        and r.inputs["namespace"].startswith(ss.JOBS_NAMESPACE_PREFIX)
    ]
    # (namespace, ServiceAccount) per team: the team's own namespace, nobody else's.
    assert sorted((a["namespace"], a["serviceAccount"]) for a in associations) == sorted(
        (f"spark-{team}", f"spark-{team}") for team in SPARK_STACKS[stack]
    )
    (bucket,) = [
        r.inputs["bucket"]
        for r in registrations.values()
        if r.type == "aws:s3/bucket:Bucket" and r.name == "data"
    ]
    for team in SPARK_STACKS[stack]:
        (policy,) = [
            json.loads(r.inputs["policy"])
            for r in registrations.values()
            if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name == f"spark-{team}-access"
        ]
        resources = {r for _, r in grants(policy)}
        assert f"arn:aws:s3:::{bucket}/teams/{team}/raw/*" in resources
        assert all(
            r.startswith(f"arn:aws:s3:::{bucket}") or r.startswith("arn:aws:kms:me-central-1:")
            for r in resources
        )
        (trust,) = [
            json.loads(r.inputs["assumeRolePolicy"])
            for r in registrations.values()
            if r.type == "aws:iam/role:Role" and r.name == f"spark-{team}"
        ]
        assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_the_data_image_has_its_own_encrypted_immutable_repository(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    (repository,) = [
        r.inputs
        for r in registrations.values()
        if r.type == "aws:ecr/repository:Repository" and r.name == "registry-data"
    ]
    assert repository["name"] == f"gpu-{stack}/data"
    assert repository["imageTagMutability"] == "IMMUTABLE"
    assert repository["encryptionConfigurations"][0]["encryptionType"] == "KMS"
