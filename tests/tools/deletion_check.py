"""Would a test notice? Delete each stateful or security-relevant resource type from the
plans (or one of its properties), run the plan tests, and list what no test missed.

Run on demand (not part of the normal suite; it runs the plan tests once per mutation):

    .venv/bin/python -m tests.tools.deletion_check                 # every mutation below
    .venv/bin/python -m tests.tools.deletion_check aws:ec2/flowLog:FlowLog \\
        'aws:ec2/launchTemplate:LaunchTemplate#metadataOptions'
    .venv/bin/python -m tests.tools.deletion_check --tests tests/aws -- aws:kms/alias:Alias
    .venv/bin/python -m tests.tools.deletion_check \
        'kubernetes:networking.k8s.io/v1:NetworkPolicy@monitoring/allow-webhooks'

A mutation is a resource type token (every resource of that type is left out of the
plan, as if the code no longer declared it), ``TYPE@[namespace/]name`` (only the
Kubernetes objects of that type with that ``metadata.name``, in that namespace where
given: one NetworkPolicy, Certificate or Secret at a time) or ``TYPE#dotted.property``
(that input is removed from every resource of the type, as if it were no longer set). Each shipped
stack's registrations are built once (`stacks.offline_plan.plan_registrations`); for
each mutation the plan tests run in this process (``pytest -x``) against mutated copies:
the shipped stacks' plans are served from the copies, and every other program run under
the recording mock runtime (component tests, plans of edited configs) is mutated as it
registers. A mutation is *caught* when a test fails, *missed* when every test passes.
Exit status: 0 when every mutation is caught, 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

import stacks.offline_plan
import tests.conftest
from stacks.offline_plan import SHIPPED_STACKS, load_stack_file
from stacks.offline_runtime import RecordingMonitor, Registration

#: The plan tests: the AWS plans and components, the Kubernetes objects of the shipped
#: plans (schemas, tenancy), and the policy pack over every shipped plan.
DEFAULT_TESTS = (
    "tests/aws",
    "tests/k8s/test_shipped_stacks.py",
    "tests/k8s/test_plan_objects.py",
    "tests/k8s/test_site_audit.py",
    "tests/k8s/test_segmentation.py",
    "tests/k8s/test_tracking.py",
    "tests/k8s/test_tracking_backup.py",
    "tests/k8s/test_trainer.py",
    "tests/k8s/test_features.py",
    "tests/k8s/test_site_oidc.py",
    "tests/k8s/test_spark.py",
    "tests/k8s/test_spark_tenancy.py",
    "tests/policies/test_shipped_stacks.py",
)

#: Resources no shipped stack declares, that the plan tests register from edited stack
#: files: key custody hsm (docs/compliance.md, tests/aws/test_key_custody.py). They are
#: checked although absent from the shipped plans.
EDITED_CONFIG_MUTATIONS = (
    "aws:kms/customKeyStore:CustomKeyStore",
    "aws:kms/customKeyStore:CustomKeyStore#xksProxyConnectivity",
    "aws:cloudhsmv2/cluster:Cluster",
    "aws:cloudhsmv2/hsm:Hsm",
    "aws:kms/key:Key#customKeyStoreId",
    "aws:kms/key:Key#xksKeyId",
)

#: Stateful and security-relevant resources of the shipped plans, and settings whose
#: loss would weaken them silently.
DEFAULT_MUTATIONS = (
    "aws:kms/key:Key",
    "aws:kms/alias:Alias",
    "aws:kms/key:Key#policy",
    "aws:s3/bucket:Bucket",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketPolicy:BucketPolicy",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketLogging:BucketLogging",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:cloudwatch/logGroup:LogGroup",
    "aws:cloudwatch/logGroup:LogGroup#retentionInDays",
    "aws:ec2/flowLog:FlowLog",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:iam/role:Role",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:eks/cluster:Cluster",
    "aws:eks/cluster:Cluster#encryptionConfig",
    "aws:eks/cluster:Cluster#enabledClusterLogTypes",
    "aws:eks/addon:Addon",
    "aws:eks/addon:Addon#configurationValues",
    "aws:eks/accessEntry:AccessEntry",
    "aws:eks/accessEntry:AccessEntry#kubernetesGroups",
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation#accessScope",
    "aws:ec2/customerGateway:CustomerGateway",
    "aws:ec2/vpnGateway:VpnGateway",
    "aws:ec2/vpnGatewayRoutePropagation:VpnGatewayRoutePropagation",
    "aws:ec2/vpnConnection:VpnConnection",
    "aws:ec2/vpnConnection:VpnConnection#tunnel1IkeVersions",
    "aws:ec2/vpnConnection:VpnConnection#tunnel2LogOptions",
    "aws:eks/podIdentityAssociation:PodIdentityAssociation",
    "aws:ec2/launchTemplate:LaunchTemplate",
    "aws:ec2/launchTemplate:LaunchTemplate#metadataOptions",
    "aws:ecr/repository:Repository",
    "aws:ecr/lifecyclePolicy:LifecyclePolicy",
    "aws:fsx/lustreFileSystem:LustreFileSystem",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
    "kubernetes:core/v1:Namespace",
    "kubernetes:core/v1:Namespace#metadata.labels",
    "kubernetes:core/v1:ConfigMap#data",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy#spec.policyTypes",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy#spec.egress",
    "kubernetes:cert-manager.io/v1:Certificate",
    "kubernetes:cert-manager.io/v1:ClusterIssuer",
    "kubernetes:core/v1:Secret",
    "kubernetes:core/v1:Secret#stringData",
    "kubernetes:core/v1:Service",
    "aws:secretsmanager/secret:Secret",
    "aws:secretsmanager/secret:Secret#kmsKeyId",
    "aws:secretsmanager/secretVersion:SecretVersion",
    "kubernetes:core/v1:ResourceQuota",
    "kubernetes:core/v1:LimitRange",
    "kubernetes:core/v1:ServiceAccount",
    "kubernetes:rbac.authorization.k8s.io/v1:Role",
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
    "kubernetes:scheduling.k8s.io/v1:PriorityClass",
    "kubernetes:core/v1:PersistentVolume",
    "kubernetes:core/v1:PersistentVolumeClaim",
    "kubernetes:storage.k8s.io/v1:StorageClass",
    "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue",
    "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue",
    "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor",
    "kubernetes:monitoring.coreos.com/v1:PodMonitor",
    "kubernetes:monitoring.coreos.com/v1:PrometheusRule",
    "kubernetes:helm.sh/v3:Release",
    # Spark (docs/data.md): the jobs, their settings and pod templates.
    "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication",
    "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication#spec.sparkConf",
    "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication#spec.driver.template",
    "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication#spec.executor.template",
    # Backups (docs/recovery.md).
    "aws:backup/vault:Vault",
    "aws:backup/vault:Vault#kmsKeyArn",
    "aws:backup/vaultLockConfiguration:VaultLockConfiguration",
    "aws:backup/vaultLockConfiguration:VaultLockConfiguration#changeableForDays",
    "aws:backup/plan:Plan",
    "aws:backup/plan:Plan#rules",
    "aws:backup/selection:Selection",
    "aws:backup/selection:Selection#conditions",
    # The on-premises tracking database's backups to the site's object store.
    "kubernetes:postgresql.cnpg.io/v1:ScheduledBackup",
    "kubernetes:postgresql.cnpg.io/v1:Cluster#spec.backup",
    "kubernetes:postgresql.cnpg.io/v1:Cluster#spec.backup.retentionPolicy",
    "kubernetes:postgresql.cnpg.io/v1:Cluster#spec.backup.barmanObjectStore.data",
    "kubernetes:core/v1:Secret@mlflow/mlflow-db-backup-credentials",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@mlflow/mlflow-database-backup",
    # Segmentation of what main added: the trainer's and the feature store's namespaces.
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@kubeflow-system/default-deny-all",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@kubeflow-system/allow-trainer-webhook",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@kubeflow-system/allow-jobset-webhook",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@feast/default-deny-all",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@feast/feast-stores",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@feast/feast-online-store",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@cnpg-system/allow-feast-registry",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy@mlflow/feast-registry-init",
    "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime#spec.template",
    *EDITED_CONFIG_MUTATIONS,
)


def parse(mutation: str) -> tuple[str, tuple[str, ...]]:
    """``TYPE``, ``TYPE@[ns/]name`` or ``TYPE#a.b`` -> (type token with its object
    selector, property path; empty to drop)."""
    type_token, _, path = mutation.partition("#")
    return type_token, tuple(p for p in path.split(".") if p)


def _selects(selector: str, reg: Registration) -> bool:
    """Whether ``reg`` is what ``TYPE[@[ns/]name]`` names."""
    type_token, _, name = selector.partition("@")
    if reg.type != type_token:
        return False
    if not name:
        return True
    namespace, _, name = name.rpartition("/")
    meta = reg.inputs.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return meta.get("name") == name and (not namespace or meta.get("namespace") == namespace)


def mutate(registrations: Mapping[str, Registration], mutation: str) -> dict[str, Registration]:
    """A copy of ``registrations`` with ``mutation`` applied."""
    type_token, path = parse(mutation)
    result: dict[str, Registration] = {}
    for urn, reg in registrations.items():
        if _selects(type_token, reg):
            if not path:
                continue
            changed = copy.deepcopy(reg)
            _remove(changed.inputs, path)
            result[urn] = changed
        else:
            result[urn] = reg
    return result


def _remove(inputs: dict[str, Any], path: tuple[str, ...]) -> None:
    node: Any = inputs
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)


@contextmanager
def mutated_runtime(
    mutation: str, base: Mapping[str, tuple[dict[str, str], dict[str, Registration]]]
) -> Iterator[None]:
    """Serve the shipped stacks' plans from mutated copies of ``base``, and mutate
    every other registration as it is recorded."""
    original_plan = stacks.offline_plan.plan_registrations
    original_register = RecordingMonitor.RegisterResource
    type_token, path = parse(mutation)

    def plan_registrations(
        stack: str, config: Mapping[str, str], secret_keys: Sequence[str] = ()
    ) -> dict[str, Registration]:
        shipped = base.get(stack)
        if shipped is not None and dict(config) == shipped[0]:
            return mutate(shipped[1], mutation)
        return original_plan(stack, config, secret_keys)

    def register(self: RecordingMonitor, request: Any) -> Any:
        response = original_register(self, request)
        reg = self.registrations.get(response.urn)
        if reg is not None and _selects(type_token, reg):
            if path:
                _remove(reg.inputs, path)
            else:
                del self.registrations[response.urn]
        return response

    patched: list[tuple[object, str, Callable[..., Any]]] = [
        (stacks.offline_plan, "plan_registrations", plan_registrations),
        # tests.conftest imports it from stacks.offline_plan when it builds a plan (the
        # plan environment only), so patching the module above reaches it too.
        (RecordingMonitor, "RegisterResource", register),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patched]
    try:
        for owner, name, value in patched:
            setattr(owner, name, value)
        _clear_plan_caches()
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        _clear_plan_caches()


def _clear_plan_caches() -> None:
    """Forget plans the test modules cached in an earlier run of this process."""
    tests.conftest._PLANS.clear()
    for name, module in list(sys.modules.items()):
        if name.startswith("tests.") and module is not None:
            for value in list(vars(module).values()):
                clear = getattr(value, "cache_clear", None)
                if callable(clear):
                    clear()


def run_tests(test_paths: Sequence[str]) -> int:
    """pytest's exit status for the paths (stopping at the first failure)."""
    args = ["-x", "-q", "--no-header", "-p", "no:cacheprovider", "-W", "ignore", *test_paths]
    return int(pytest.main(args))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.deletion_check")
    parser.add_argument(
        "mutations", nargs="*", help="TYPE, TYPE@[ns/]name or TYPE#property (default: all)"
    )
    parser.add_argument("--tests", nargs="+", default=list(DEFAULT_TESTS), help="test paths")
    options = parser.parse_args(argv)
    mutations = options.mutations or list(DEFAULT_MUTATIONS)

    base = {}
    for stack in SHIPPED_STACKS:
        config, secret_keys = load_stack_file(stack)
        base[stack] = (config, stacks.offline_plan.plan_registrations(stack, config, secret_keys))
    present = {reg.type for _, regs in base.values() for reg in regs.values()}

    results: list[tuple[str, str, float]] = []
    with mutated_runtime("", base):  # no mutation: the tests must pass as shipped
        baseline = run_tests(options.tests)
    if baseline != 0:
        print("the plan tests fail without any mutation: fix them first", file=sys.stderr)
        return 2
    for mutation in mutations:
        kind = parse(mutation)[0].partition("@")[0]
        if kind not in present and mutation not in EDITED_CONFIG_MUTATIONS:
            results.append((mutation, "absent from every shipped plan", 0.0))
            continue
        started = time.perf_counter()
        with mutated_runtime(mutation, base):
            status = run_tests(options.tests)
        verdict = {0: "MISSED", 1: "caught"}.get(status, f"pytest status {status}")
        results.append((mutation, verdict, time.perf_counter() - started))
        print(f"deletion-check: {mutation}: {verdict}", flush=True)

    width = max(len(m) for m, _, _ in results)
    print("\nmutation".ljust(width + 1), "result")
    for mutation, verdict, seconds in results:
        print(mutation.ljust(width), verdict, f"({seconds:.0f} s)" if seconds else "")
    missed = [m for m, verdict, _ in results if verdict == "MISSED"]
    print(f"\n{len(missed)} of {len(results)} mutations missed by every test")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
