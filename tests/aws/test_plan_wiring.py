"""Resources of the uae-prod plan that only matter through what they connect: the VPC
endpoints (traffic to AWS APIs stays in the VPC and in the region), the FSx-to-S3 data
repository association (the shared file system shows the data bucket) and the VPC CNI's
network-policy switch (without it the teams' NetworkPolicies are not enforced). Each
test fails if the resource is removed or wired to the wrong thing."""

from __future__ import annotations

import json

from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan

STACK = "uae-prod"
REGION = "me-central-1"
#: Every AWS API the nodes and pods call, reached over private interface endpoints.
INTERFACE_SERVICES = {"s3", "ecr.api", "ecr.dkr", "sts", "logs", "ec2", "eks", "eks-auth"}


def of_type(type_token: str) -> list[Registration]:
    registrations, _ = shipped_plan(STACK)
    return sorted((r for r in registrations.values() if r.type == type_token), key=lambda r: r.urn)


def private_subnet_ids() -> set[str]:
    return {
        s.id
        for s in of_type("aws:ec2/subnet:Subnet")
        if "kubernetes.io/role/internal-elb" in s.inputs.get("tags", {})
    }


def private_route_table_ids() -> set[str]:
    """Route tables whose default route leaves through a NAT gateway."""
    return {
        r.inputs["routeTableId"]
        for r in of_type("aws:ec2/route:Route")
        if r.inputs.get("destinationCidrBlock") == "0.0.0.0/0" and "natGatewayId" in r.inputs
    }


def test_every_aws_api_is_reached_through_a_private_interface_endpoint() -> None:
    (vpc,) = of_type("aws:ec2/vpc:Vpc")
    endpoints = of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    interface = {
        e.inputs["serviceName"].removeprefix(f"com.amazonaws.{REGION}."): e
        for e in endpoints
        if e.inputs["vpcEndpointType"] == "Interface"
    }
    assert set(interface) == INTERFACE_SERVICES
    subnets = private_subnet_ids()
    assert len(subnets) == 3
    rules = of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    for service, endpoint in interface.items():
        assert endpoint.inputs["vpcId"] == vpc.id, service
        assert endpoint.inputs["privateDnsEnabled"] is True, service
        assert set(endpoint.inputs["subnetIds"]) == subnets, service
        (group,) = endpoint.inputs["securityGroupIds"]
        # The endpoints' group admits HTTPS from the VPC, and nothing else.
        group_rules = [r.inputs for r in rules if r.inputs["securityGroupId"] == group]
        assert group_rules and all(
            (r["ipProtocol"], r["fromPort"], r["toPort"], r["cidrIpv4"])
            == ("tcp", 443, 443, vpc.inputs["cidrBlock"])
            for r in group_rules
        ), service
    # Pods' default-deny egress allows the VPC CIDR, not S3's public ranges: S3's
    # interface endpoint must answer S3's own names inside the VPC.
    assert interface["s3"].inputs["dnsOptions"] == {
        "privateDnsOnlyForInboundResolverEndpoint": False
    }


def test_s3_gateway_endpoint_serves_every_private_route_table() -> None:
    (vpc,) = of_type("aws:ec2/vpc:Vpc")
    (gateway,) = [
        e
        for e in of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
        if e.inputs["vpcEndpointType"] == "Gateway"
    ]
    assert gateway.inputs["serviceName"] == f"com.amazonaws.{REGION}.s3"
    assert gateway.inputs["vpcId"] == vpc.id
    tables = private_route_table_ids()
    assert len(tables) == 3
    assert set(gateway.inputs["routeTableIds"]) == tables


def test_the_shared_file_system_is_linked_to_the_data_bucket() -> None:
    (fs,) = of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    buckets = {b.name: b for b in of_type("aws:s3/bucket:Bucket")}
    (link,) = of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert link.inputs["fileSystemId"] == fs.id
    assert link.inputs["dataRepositoryPath"] == f"s3://{buckets['data'].inputs['bucket']}"
    assert link.inputs["fileSystemPath"] == "/data"
    assert link.inputs["batchImportMetaDataOnCreate"] is True
    every_change = {"events": ["NEW", "CHANGED", "DELETED"]}
    assert link.inputs["s3"] == {"autoImportPolicy": every_change, "autoExportPolicy": every_change}


def test_the_vpc_cni_enforces_network_policies_with_its_own_role() -> None:
    addons = {a.inputs["addonName"]: a for a in of_type("aws:eks/addon:Addon")}
    cni = addons["vpc-cni"]
    assert json.loads(cni.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
    (association,) = cni.inputs["podIdentityAssociations"]
    assert association["serviceAccount"] == "aws-node"
    role_name = association["roleArn"].rsplit("/", 1)[1]
    attached = {
        a.inputs["policyArn"]
        for a in of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.inputs["role"] == role_name
    }
    assert attached == {"arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"}
    # The pod identity agent the association relies on is installed too.
    assert "eks-pod-identity-agent" in addons
    # What the switch enforces: every team namespace starts from default-deny.
    registrations, _ = shipped_plan(STACK)
    denies = {
        r.inputs["metadata"]["namespace"]
        for r in registrations.values()
        if r.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
        and r.inputs["metadata"]["name"] == "default-deny-all"
    }
    assert {"team-llm-research", "team-speech"} <= denies
