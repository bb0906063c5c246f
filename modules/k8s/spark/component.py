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
    """The Spark Operator; per team with a job, its Spark namespace with the team's
    ServiceAccount, the drivers' Role and NetworkPolicies; and one ``SparkApplication``
    per data-preparation job, in its team's namespace."""

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
        # Per team with a job: its own namespace, fenced, with its ServiceAccount and the
        # drivers' Role bound to that ServiceAccount only (nothing spans two teams).
        namespaces: dict[str, pulumi.Resource] = {}
        fences: dict[str, list[pulumi.Resource]] = {}
        bindings: dict[str, list[pulumi.Resource]] = {}
        jobs = [placed.job for placed in inputs.jobs]
        for team in inputs.spec.teams:
            team_ns = register(
                namespace(ss.jobs_namespace(team), "restricted", version), self, provider
            )
            namespaces[team] = team_ns
            fences[team] = [
                register(policy, self, provider, [team_ns])
                for policy in ss.network_policies(
                    team,
                    inputs.store,
                    network=inputs.network,
                    jobs=jobs,
                    vpc_cidr=inputs.vpc_cidr,
                    egress_cidrs=inputs.egress_cidrs,
                )
            ]
            role = register(ss.driver_role(team), self, provider, [team_ns])
            account = register(ss.service_account(team), self, provider, [team_ns])
            binding = register(ss.driver_role_binding(team), self, provider, [role, account])
            bindings[team] = [account, binding]
        operator = helm_release(
            ss.OPERATOR_RELEASE,
            ss.SPARK_OPERATOR,
            ss.OPERATOR_NAMESPACE,
            values=ss.operator_values(inputs.spec, inputs.node_selector),
            parent=self,
            provider=provider,
            # The chart creates the controller's and the webhook's Roles in each job
            # namespace, which must exist first.
            depends_on=[operator_ns, *namespaces.values()],
        )
        for policy in ss.operator_network_policies(inputs.network):
            register(policy, self, provider, [operator_ns])
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
                # The operator (its CRD and webhook) first; the team's ServiceAccount,
                # its rights and its network fence before the job's pods can start.
                [operator, *bindings[job.team], *fences[job.team]],
            )
        self.register_outputs({})
