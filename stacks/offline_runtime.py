"""Running a stack's program without the Pulumi CLI or a cloud account.

The program runs under Pulumi's mock runtime. `RecordingMonitor` keeps every
registration exactly as the engine would receive it (type, parent, provider, protect,
dependencies, inputs in their camelCase wire shape); `CatalogMocks` answers data-source
calls from moto's copy of AWS's catalog (zones, instance types and where they are
offered) and gives each created resource the computed outputs AWS would (ARNs, ids,
endpoints), derived from its URN so the same program always yields the same values.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from google.protobuf import json_format
from moto import mock_aws
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.sync_await import _sync_await

ACCOUNT_ID = "123456789012"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's unknown-value sentinel
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
_SIG_KEY = "4dabf18193072939515e22adb298388d"
#: Outputs of other stacks, as a ``pulumi.StackReference`` reads them in the offline
#: plan (no backend holds them here): ``<stack>.json`` with ``outputs`` and
#: ``secretOutputNames``. See stacks/offline-outputs/README.md.
STACK_OUTPUTS_DIR = Path(__file__).resolve().parent / "offline-outputs"
STACK_REFERENCE_TYPE = "pulumi:pulumi:StackReference"


def referenced_stack_outputs(stack_name: str) -> dict[str, Any]:
    """The state of a StackReference to ``stack_name`` (``org/project/stack``) offline."""
    stack = stack_name.rsplit("/", 1)[-1]
    path = STACK_OUTPUTS_DIR / f"{stack}.json"
    if not path.is_file():
        raise LookupError(
            f"the offline plan cannot read the outputs of stack {stack_name}: add "
            f"{path.relative_to(STACK_OUTPUTS_DIR.parent.parent)} (see its README)"
        )
    document = json.loads(path.read_text(encoding="utf-8"))
    return {
        "name": stack_name,
        "outputs": dict(document["outputs"]),
        "secretOutputNames": list(document.get("secretOutputNames", [])),
    }


def _digest(text: str, length: int = 17) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _engine_view(value: Any) -> Any:
    """A wire value as `pulumi preview --json` shows it: secrets masked, resource
    references as their URN, whole floats as integers."""
    if isinstance(value, dict):
        signature = value.get(_SIG_KEY)
        if signature == _SECRET_SIG:
            return "[secret]"
        if signature == _RESOURCE_SIG:
            return value.get("urn", "")
        return {k: _engine_view(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_engine_view(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass
class Registration:
    """One resource as the engine received it."""

    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    provider: str
    protect: bool
    inputs: dict[str, Any]
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    aliases: list[str] = field(default_factory=list)
    id: str = ""
    component_outputs: dict[str, Any] = field(default_factory=dict)


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """A mock monitor that also records each registration in the engine's shape."""

    def __init__(self, mocks: pulumi_mocks.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        self.registrations[response.urn] = Registration(
            urn=response.urn,
            type=request.type,
            name=request.name,
            custom=bool(request.custom),
            parent=request.parent,
            provider=request.provider,
            protect=bool(request.protect),
            inputs=_engine_view(json_format.MessageToDict(request.object)),
            dependencies=sorted(set(request.dependencies)),
            property_dependencies={
                key: sorted(set(deps.urns))
                for key, deps in sorted(request.propertyDependencies.items())
                if deps.urns
            },
            aliases=sorted(a.urn for a in request.aliases if a.urn),
            id=response.id,
        )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        """Keep what a component reports about itself (``register_outputs``)."""
        registration = self.registrations.get(request.urn)
        if registration is not None:
            outputs = json_format.MessageToDict(request.outputs)
            registration.component_outputs = _engine_view(outputs)
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]


#: Data sources answered from moto's static catalog (the same answer for the same
#: arguments and region, whatever a test created): answered once per process.
CATALOG_TOKENS = frozenset(
    {
        "aws:index/getAvailabilityZones:getAvailabilityZones",
        "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings",
        "aws:ec2/getInstanceType:getInstanceType",
    }
)
_CATALOG_ANSWERS: dict[tuple[str, str, str], dict[str, Any]] = {}


def _ec2(region: str) -> Any:
    """An EC2 client of ``region`` (moto's, inside ``mock_aws``)."""
    return boto3.client("ec2", region_name=region)


class CatalogMocks(pulumi_mocks.Mocks):
    """Answers invokes from moto's AWS catalog and fills in computed outputs.

    Must be used inside an active ``moto.mock_aws()`` context.
    """

    def __init__(self) -> None:
        self.provider_regions: dict[str, str] = {}  # AWS provider name -> its region
        #: the program's stack outputs (``pulumi.export``): name -> whether it is secret
        self.stack_exports: dict[str, bool] = {}
        self._calls: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
            "aws:index/getCallerIdentity:getCallerIdentity": self._caller_identity,
            "aws:index/getPartition:getPartition": lambda _a, _r: {
                "partition": "aws",
                "dnsSuffix": "amazonaws.com",
                "id": "aws",
            },
            "aws:index/getAvailabilityZones:getAvailabilityZones": self._zones,
            "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": self._offerings,
            "aws:ec2/getInstanceType:getInstanceType": self._instance_type,
            "aws:secretsmanager/getSecretVersion:getSecretVersion": self._secret_version,
        }

    # -- invokes -----------------------------------------------------------------
    def call(
        self, args: pulumi_mocks.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        answer = self._calls.get(args.token)
        if answer is None:
            raise LookupError(f"the offline plan cannot answer the data source {args.token}")
        region = args.args.get("region") or self._region_of(args.provider)
        if not region:
            raise ValueError(
                f"{args.token}: no region (every AWS call needs the region-pinned provider)"
            )
        if args.token not in CATALOG_TOKENS:
            return answer(args.args, region), []
        # moto's catalog of a region does not change: each question is asked of it once
        # per process. Asking again created a boto3 client each time, which read and
        # decoded the service's JSON model again (a third of a plan's CPU time).
        key = (args.token, region, json.dumps(args.args, sort_keys=True, default=str))
        if key not in _CATALOG_ANSWERS:
            _CATALOG_ANSWERS[key] = answer(args.args, region)
        return copy.deepcopy(_CATALOG_ANSWERS[key]), []

    @staticmethod
    def _caller_identity(_args: dict[str, Any], _region: str) -> dict[str, Any]:
        arn = f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/platform-deployer/offline-plan"
        return {"accountId": ACCOUNT_ID, "arn": arn, "userId": "AROAOFFLINEPLAN", "id": ACCOUNT_ID}

    @staticmethod
    def _zones(_args: dict[str, Any], region: str) -> dict[str, Any]:
        zones = _ec2(region).describe_availability_zones()
        available = sorted(
            (z for z in zones["AvailabilityZones"] if z["State"] == "available"),
            key=lambda z: z["ZoneName"],
        )
        return {
            "names": [z["ZoneName"] for z in available],
            "zoneIds": [z["ZoneId"] for z in available],
            "groupNames": [z.get("GroupName", region) for z in available],
            "id": region,
        }

    @staticmethod
    def _offerings(args: dict[str, Any], region: str) -> dict[str, Any]:
        filters = [
            {"Name": f["name"], "Values": list(f["values"])} for f in args.get("filters") or []
        ]
        client = _ec2(region)
        offerings: list[dict[str, Any]] = []
        for page in client.get_paginator("describe_instance_type_offerings").paginate(
            LocationType=args.get("locationType", "availability-zone"), Filters=filters
        ):
            offerings += page["InstanceTypeOfferings"]
        offerings.sort(key=lambda o: (o["InstanceType"], o["Location"]))
        return {
            "locations": [o["Location"] for o in offerings],
            "locationTypes": [o["LocationType"] for o in offerings],
            "instanceTypes": [o["InstanceType"] for o in offerings],
            "id": region,
        }

    @staticmethod
    def _instance_type(args: dict[str, Any], region: str) -> dict[str, Any]:
        name = args["instanceType"]
        client = _ec2(region)
        described = client.describe_instance_types(InstanceTypes=[name])["InstanceTypes"]
        if not described:
            raise ValueError(f"instance type {name} does not exist")
        info = described[0]
        network = info.get("NetworkInfo", {})
        gpus = info.get("GpuInfo", {}).get("Gpus", [])
        return {
            "instanceType": name,
            "id": name,
            "defaultVcpus": info["VCpuInfo"]["DefaultVCpus"],
            "memorySize": info["MemoryInfo"]["SizeInMiB"],
            "efaSupported": bool(network.get("EfaSupported", False)),
            "efaMaximumInterfaces": network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
            "maximumNetworkCards": network.get("MaximumNetworkCards", 1),
            "maximumNetworkInterfaces": network.get("MaximumNetworkInterfaces", 1),
            "supportedArchitectures": info.get("ProcessorInfo", {}).get(
                "SupportedArchitectures", []
            ),
            "gpuses": [
                {
                    "count": g["Count"],
                    "manufacturer": g["Manufacturer"],
                    "memorySize": g.get("MemoryInfo", {}).get("SizeInMiB", 0),
                    "name": g["Name"],
                }
                for g in gpus
            ],
        }

    @staticmethod
    def _secret_version(args: dict[str, Any], _region: str) -> dict[str, Any]:
        """An RDS-managed master secret as Secrets Manager returns it: JSON with the
        master user name and a password (a stand-in: the real one exists only in AWS)."""
        arn = str(args.get("secretId", ""))
        if ":secret:rds!" not in arn:
            raise LookupError(f"the offline plan only answers RDS-managed secrets, not {arn!r}")
        content = {"username": "mlflow", "password": "offline-plan-placeholder"}
        version = str(uuid.uuid5(uuid.NAMESPACE_URL, arn))
        return {
            "arn": arn,
            "id": f"{arn}|AWSCURRENT",
            "secretId": arn,
            "secretString": json.dumps(content, sort_keys=True),
            "secretBinary": "",
            "versionId": version,
            "versionStage": "AWSCURRENT",
            "versionStages": ["AWSCURRENT"],
            "createdDate": "2026-01-01T00:00:00Z",
        }

    # -- resources ---------------------------------------------------------------
    def new_resource(
        self, args: pulumi_mocks.MockResourceArgs
    ) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        if args.typ == STACK_REFERENCE_TYPE:
            name = str(inputs.get("name", args.name))
            return name, referenced_stack_outputs(name)
        if args.typ.startswith("pulumi:providers:"):
            resource_id = _digest(f"provider/{args.name}", 8)
            if args.typ == "pulumi:providers:aws":
                self.provider_regions[args.name] = str(inputs.get("region", ""))
            return resource_id, inputs
        region = self._region_of(args.provider)
        outputs = computed_outputs(args.typ, args.name, inputs, region)
        return outputs.pop("id"), {**inputs, **outputs}

    def _region_of(self, provider_ref: str | None) -> str:
        if not provider_ref:
            return ""
        name = provider_ref.split("::")[-2] if "::" in provider_ref else ""
        return self.provider_regions.get(name, "")


#: Resources AWS knows by the name they are given (their ``id`` and ``name``), and their
#: ARN (``base``: ``arn:aws:<service>:<region>:<account>``).
_NAMED_ARNS = {
    "aws:iam/role:Role": "arn:aws:iam::{account}:role/{name}",
    "aws:eks/cluster:Cluster": "{base}:cluster/{name}",
    "aws:rds/subnetGroup:SubnetGroup": "{base}:subgrp:{name}",
    "aws:rds/parameterGroup:ParameterGroup": "{base}:pg:{name}",
    "aws:backup/vault:Vault": "{base}:backup-vault:{name}",
}


def computed_outputs(
    type_token: str, name: str, inputs: Mapping[str, Any], region: str
) -> dict[str, Any]:
    """The outputs AWS computes for a new resource, derived from its name.

    Only what the program and the plan read downstream is synthesised; everything
    else a real deployment would return stays out of the plan.
    """
    key = f"{type_token}/{name}"
    hexid = _digest(key)
    service = (
        type_token.split(":")[1].split("/", maxsplit=1)[0] if type_token.startswith("aws:") else ""
    )
    arn_base = f"arn:aws:{service}:{region}:{ACCOUNT_ID}"
    given_name = str(inputs.get("name") or f"{name}-{hexid[:7]}")
    out: dict[str, Any] = {"id": hexid, "arn": f"{arn_base}:{name}"}
    if type_token in _NAMED_ARNS:
        arn = _NAMED_ARNS[type_token].format(base=arn_base, account=ACCOUNT_ID, name=given_name)
        out |= {"id": given_name, "name": given_name, "arn": arn}
    if type_token == "aws:kms/key:Key":
        key_id = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
        out |= {"id": key_id, "keyId": key_id, "arn": f"{arn_base}:key/{key_id}"}
    elif type_token == "aws:s3/bucket:Bucket":
        bucket = str(inputs.get("bucket") or f"{name}-{hexid[:7]}")
        out |= {
            "id": bucket,
            "bucket": bucket,
            "arn": f"arn:aws:s3:::{bucket}",
            "bucketRegionalDomainName": f"{bucket}.s3.{region}.amazonaws.com",
            "region": region,
        }
    elif type_token == "aws:eks/cluster:Cluster":
        out |= {
            "endpoint": f"https://{hexid.upper()}.gr7.{region}.eks.amazonaws.com",
            "certificateAuthority": {
                "data": base64.b64encode(f"offline-ca:{given_name}".encode()).decode()
            },
            "vpcConfig": {
                **dict(inputs.get("vpcConfig") or {}),
                "clusterSecurityGroupId": f"sg-{hexid}",
            },
        }
    elif type_token == "aws:rds/instance:Instance":
        # What RDS returns for an instance with manage_master_user_password: its
        # address, and the Secrets Manager secret (named rds!db-<uuid>) with its key.
        identifier = str(inputs.get("identifier") or given_name)
        resource_uuid = uuid.uuid5(uuid.NAMESPACE_URL, key)
        address = f"{identifier}.c{hexid[:12]}.{region}.rds.amazonaws.com"
        port = int(inputs.get("port") or 5432)
        out |= {
            "id": f"db-{hexid.upper()[:26]}",
            "identifier": identifier,
            "arn": f"arn:aws:rds:{region}:{ACCOUNT_ID}:db:{identifier}",
            "address": address,
            "endpoint": f"{address}:{port}",
            "resourceId": f"db-{hexid.upper()[:26]}",
        }
        if inputs.get("manageMasterUserPassword"):
            secret = f"rds!db-{resource_uuid}"
            out["masterUserSecrets"] = [
                {
                    "secretArn": (
                        f"arn:aws:secretsmanager:{region}:{ACCOUNT_ID}:secret:{secret}-{hexid[:6]}"
                    ),
                    "kmsKeyId": inputs.get("masterUserSecretKmsKeyId", ""),
                    "secretStatus": "active",
                }
            ]
    elif type_token == "aws:eks/nodeGroup:NodeGroup":
        group = str(inputs.get("nodeGroupName") or given_name)
        out |= {
            "id": group,
            "arn": f"{arn_base}:nodegroup/{group}",
            "resources": [{"autoscalingGroups": [{"name": f"eks-{group}-{hexid[:8]}"}]}],
        }
    elif type_token == "aws:ec2/launchTemplate:LaunchTemplate":
        out |= {
            "id": f"lt-{hexid}",
            "latestVersion": 1,
            "arn": f"{arn_base}:launch-template/lt-{hexid}",
        }
    elif type_token == "aws:ecr/repository:Repository":
        repo = str(inputs.get("name") or given_name)
        out |= {
            "id": repo,
            "arn": f"{arn_base}:repository/{repo}",
            "repositoryUrl": f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com/{repo}",
            "registryId": ACCOUNT_ID,
        }
    elif type_token == "aws:fsx/lustreFileSystem:LustreFileSystem":
        out |= {
            "id": f"fs-{hexid}",
            "arn": f"{arn_base}:file-system/fs-{hexid}",
            "dnsName": f"fs-{hexid}.fsx.{region}.amazonaws.com",
            "mountName": hexid[:8],
        }
    elif type_token == "aws:cloudwatch/logGroup:LogGroup":
        out |= {
            "id": given_name,
            "arn": f"arn:aws:logs:{region}:{ACCOUNT_ID}:log-group:{given_name}",
        }
    elif type_token == "aws:backup/plan:Plan":
        plan_id = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
        out |= {"id": plan_id, "arn": f"{arn_base}:backup-plan:{plan_id}", "version": hexid}
    elif type_token == "aws:kms/customKeyStore:CustomKeyStore":
        out |= {"id": f"cks-{hexid}"}
    elif type_token == "aws:cloudhsmv2/cluster:Cluster":
        # Cluster ids are "cluster-" and 11 to 16 characters of a-z and 2-7.
        cluster = "cluster-" + "".join(
            "abcdefghijklmnopqrstuvwxyz234567"[int(c, 16) * 2] for c in hexid[:11]
        )
        out |= {"id": cluster, "clusterId": cluster, "securityGroupId": f"sg-{hexid}"}
    elif type_token == "aws:cloudhsmv2/hsm:Hsm":
        out |= {"id": f"hsm-{hexid[:11]}", "hsmId": f"hsm-{hexid[:11]}", "hsmEniId": f"eni-{hexid}"}
    elif type_token == "aws:ec2/eip:Eip":
        out |= {"id": f"eipalloc-{hexid}", "allocationId": f"eipalloc-{hexid}"}
    elif type_token == "aws:ec2/placementGroup:PlacementGroup":
        out |= {"id": given_name, "name": given_name}
    elif type_token.startswith("aws:ec2/") or type_token.startswith("aws:vpc/"):
        prefix = {"vpc": "vpc", "subnet": "subnet", "securityGroup": "sg", "internetGateway": "igw",
                  "natGateway": "nat", "routeTable": "rtb", "vpcEndpoint": "vpce"}  # fmt: skip
        kind = type_token.split("/")[1].split(":", maxsplit=1)[0]
        out["id"] = f"{prefix.get(kind, kind.lower())}-{hexid}"
    return out


@contextlib.contextmanager
def _without_source_positions() -> Iterator[None]:
    """Registrations without the stack trace and source position the SDK attaches to each
    for the engine's diagnostics: the plan records neither, and extracting every frame of
    every registration's call stack (`traceback.extract_stack`, source lines read) was
    a tenth of a plan's CPU time. Private SDK function (pulumi 3.272's
    `pulumi.runtime.resource._get_stack_trace`); restored when the run ends, so a real
    `pulumi up` in the same process would be unaffected."""
    from pulumi.runtime import resource as sdk_resource  # noqa: PLC0415
    from pulumi.runtime.proto import source_pb2  # noqa: PLC0415

    original = sdk_resource._get_stack_trace
    sdk_resource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = original


def run_program(
    program: Callable[[], None],
    *,
    project: str,
    stack: str,
    config: Mapping[str, str],
    secret_keys: list[str],
) -> tuple[dict[str, Registration], CatalogMocks]:
    """Run ``program`` under the mock runtime and return every registration.

    Exceptions raised by the program (including ``pulumi.RunError`` for a bad stack
    config) propagate to the caller after the runtime has shut down.
    """
    import pulumi  # noqa: PLC0415 - imported late so set_mocks configures a fresh runtime

    with mock_aws(), _without_source_positions():
        mocks = CatalogMocks()
        monitor = RecordingMonitor(mocks)
        # A fresh root stack per run, so one process can plan several stacks.
        pulumi.runtime.settings.ROOT.set(None)
        pulumi_mocks.set_mocks(mocks, project=project, stack=stack, preview=True, monitor=monitor)
        pulumi.runtime.set_all_config(dict(config), secret_keys)
        _sync_await(pulumi.runtime.stack.run_pulumi_func(program))
        root = pulumi.runtime.settings.get_root_resource()
        outputs = dict(getattr(root, "outputs", None) or {})

        async def secret_flags() -> dict[str, bool]:
            return {
                name: bool(await pulumi.Output.from_input(value).is_secret())
                for name, value in outputs.items()
            }

        mocks.stack_exports = _sync_await(secret_flags())
    return monitor.registrations, mocks
