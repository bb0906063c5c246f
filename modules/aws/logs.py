"""CloudWatch log groups the platform creates: always CMK-encrypted, always expiring."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws


def encrypted_log_group(
    name: str,
    log_group_name: str,
    key_arn: pulumi.Input[str],
    retention_days: int,
    parent: pulumi.Resource,
) -> aws.cloudwatch.LogGroup:
    """A log group encrypted with ``key_arn`` that keeps events ``retention_days``.

    Args:
        name: the Pulumi resource name.
        log_group_name: the CloudWatch name (services writing to a fixed name, such as
            EKS's ``/aws/eks/<cluster>/cluster``, need it created first to get a key).
        key_arn: the logs CMK.
        retention_days: a retention CloudWatch accepts.
        parent: the owning component (the group inherits its provider).
    """
    return aws.cloudwatch.LogGroup(
        name,
        name=log_group_name,
        kms_key_id=key_arn,
        retention_in_days=retention_days,
        # Audit evidence (flow logs, control-plane logs): never deleted with the stack.
        opts=pulumi.ResourceOptions(parent=parent, protect=True),
    )
