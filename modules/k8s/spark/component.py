"""`SparkPlatform`: registers what `modules.k8s.spark.spec` builds.

Thin on purpose: every object and value comes from a pure function of the spec (tested
against the upstream chart and CRD); this file only turns the bucket's name into the
jobs' ``s3://`` locations, orders the objects and sends them through the cluster's
provider.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.common import helm_release, namespace, register
from modules.k8s.spark import spec as ss


def _uri(bucket: pulumi.Output[str], key: str) -> pulumi.Output[str]:
    return bucket.apply(lambda name: ss.s3_uri(name, key))


class SparkPlatform(pulumi.ComponentResource):
    """The Spark Operator, the jobs' namespace, ServiceAccounts, the drivers' Role and
    NetworkPolicies, and one ``SparkApplication`` per data-preparation job."""

    def __init__(
        self,
        name: str,
        inputs: ss.SparkInputs,
        provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:SparkPlatform", name, None, opts)
        version = inputs.kubernetes_version
        operator_ns = register(
            namespace(ss.OPERATOR_NAMESPACE, "restricted", version), self, provider
        )
        jobs_ns = register(namespace(ss.JOBS_NAMESPACE, "restricted", version), self, provider)
        operator = helm_release(
            ss.OPERATOR_RELEASE,
            ss.SPARK_OPERATOR,
            ss.OPERATOR_NAMESPACE,
            values=ss.operator_values(inputs.spec, inputs.node_selector),
            parent=self,
            provider=provider,
            # The chart creates the controller's Role in the jobs' namespace.
            depends_on=[operator_ns, jobs_ns],
        )
        for policy in ss.operator_network_policies(inputs.network):
            register(policy, self, provider, [operator_ns])
        fenced = [
            register(policy, self, provider, [jobs_ns])
            for policy in ss.network_policies(
                inputs.store,
                inputs.network,
                [placed.job for placed in inputs.jobs],
                inputs.vpc_cidr,
                inputs.egress_cidrs,
            )
        ]
        role = register(ss.driver_role(), self, provider, [jobs_ns])
        accounts = {
            team: register(ss.service_account(team), self, provider, [jobs_ns])
            for team in inputs.spec.teams
        }
        bindings = {
            team: register(ss.driver_role_binding(team), self, provider, [role, account])
            for team, account in accounts.items()
        }
        bucket = pulumi.Output.from_input(inputs.store.bucket)
        for placed in inputs.jobs:
            job = placed.job
            input_key, output_key, log_key = ss.location_keys(job)
            where = ss.Locations(
                input_uri=_uri(bucket, input_key),
                output_uri=_uri(bucket, output_key),
                event_log_uri=_uri(bucket, log_key),
            )
            register(
                ss.spark_application(job, inputs.store, placed.pool, inputs.image, where),
                self,
                provider,
                # The operator (its CRD and webhook) first; the job's ServiceAccount,
                # its rights and its network fence before its pods can start.
                [operator, accounts[job.team], bindings[job.team], *fenced],
            )
        self.register_outputs({})
