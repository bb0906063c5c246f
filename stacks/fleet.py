"""The fleet across stack files: who manages whom, checked before any resource exists.

A manager's ``fleet.workers`` names worker stacks of this project; each worker's
``fleetWorker.manager`` names its manager. Both files live in ``stacks/`` (the
project's ``stackConfigDir``), so the program reads the other stacks' files to check
the topology as a whole: an unknown stack, a worker that is its own manager, a worker
claimed by two managers, a cycle or a nested fleet, a worker outside the UAE, a
bursting team missing on a worker. Every problem is reported at once, with the key
the user wrote, like the stack config's own problems.

What one stack needs *from* another at run time (the worker's kubeconfig for the
manager) travels through ``pulumi.StackReference``, never through the files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

import pulumi
import yaml

from modules.k8s.fleet.spec import (
    KUBECONFIG_OUTPUT,
    FleetManagerInputs,
    TeamBurstQuota,
    WorkerInputs,
)
from modules.k8s.site.spec import SiteSpec
from modules.k8s.tenancy.quotas import team_flavor_quotas
from modules.pools import NodePoolProfile
from modules.residency import UAE_AWS_REGIONS, UAE_COUNTRIES

from .config import PROJECT, StackConfig, parse_stack_config
from .config_parsing import ConfigError, engine_text
from .pricing import PriceSnapshot, load_snapshot

STACKS_DIR = Path(__file__).resolve().parent

#: Loads another stack's validated config: None for an unknown stack, the
#: `ConfigError` for a stack file with problems.
StackLoader = Callable[[str], "StackConfig | ConfigError | None"]


def stack_file_config(path: Path) -> dict[str, str]:
    """A stack file's non-secret values as the engine passes them (strings, JSON)."""
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    raw = document.get("config") if isinstance(document, dict) else None
    flat: dict[str, str] = {}
    for key, value in (raw or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            continue  # secrets are not needed to check the topology
        flat[key] = engine_text(value)
    return flat


@cache
def load_stack(stack: str) -> StackConfig | ConfigError | None:
    """The validated config of a stack of this project, read from its stack file."""
    path = STACKS_DIR / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return None
    try:
        return parse_stack_config(stack_file_config(path))
    except ConfigError as err:
        return err
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        return ConfigError([f"{path.name} is not valid YAML: {err}"])


def known_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS_DIR.glob("Pulumi.*.yaml"))


def site_of(config: StackConfig) -> SiteSpec:
    """Where a stack's cluster runs (AWS stacks: their region)."""
    if config.site is not None:
        return config.site
    return SiteSpec(name=f"aws-{config.region}", kind="aws-eks", region=config.region)


def api_server_cidrs(config: StackConfig) -> tuple[str, ...]:
    """Where a stack's API server is: an AWS stack's VPC (its EKS private endpoint's
    interfaces are there), an on-premises stack's declared addresses."""
    if config.onprem is not None:
        return config.onprem.api_server_cidrs
    return (config.network.vpc_cidr,)


def outside_uae(site: SiteSpec) -> str | None:
    """Why ``site`` is not a UAE cluster, or None."""
    if site.kind == "aws-eks" and site.region not in UAE_AWS_REGIONS:
        return f"region {site.region} is outside the UAE ({', '.join(UAE_AWS_REGIONS)})"
    if site.country not in UAE_COUNTRIES:
        return f"site {site.name} is in country {site.country}, not {', '.join(UAE_COUNTRIES)}"
    return None


def fleet_problems(
    stack: str,
    config: StackConfig,
    load: StackLoader = load_stack,
    stacks: Callable[[], list[str]] = known_stacks,
) -> list[str]:
    """Every problem of ``stack``'s place in a fleet, one line each (empty: fine)."""
    key = f"{PROJECT}:"
    problems: list[str] = []
    if config.fleet is not None:
        burst_teams = config.fleet.burst_teams or tuple(t.name for t in config.teams)
        for i, ref in enumerate(config.fleet.workers):
            where = f"{key}fleet.workers[{i}].stack"
            if ref.stack == stack:
                problems.append(
                    f"{where}: got {stack!r}; a worker cannot be its own manager "
                    "(Kueue does not run the manager as one of its workers)"
                )
                continue
            worker = load(ref.stack)
            if worker is None:
                problems.append(
                    f"{where}: got {ref.stack!r}; unknown stack: no stacks/Pulumi.{ref.stack}.yaml "
                    f"(stacks: {', '.join(stacks())})"
                )
                continue
            if isinstance(worker, ConfigError):
                problems.append(
                    f"{where}: got {ref.stack!r}; that stack's file has "
                    f"{len(worker.problems)} problem(s): run `make plan STACK={ref.stack}`"
                )
                continue
            problems += _worker_problems(stack, ref.stack, worker, where, burst_teams)
        for other in stacks():
            if other == stack:
                continue
            peer = load(other)
            if not isinstance(peer, StackConfig) or peer.fleet is None:
                continue
            shared = {w.stack for w in peer.fleet.workers} & {w.stack for w in config.fleet.workers}
            for name in sorted(shared):
                problems.append(
                    f"{key}fleet.workers: got {name!r}; stack {other} lists it as its worker "
                    "too: a worker has exactly one manager"
                )
    if config.fleet_worker is not None:
        where = f"{key}fleetWorker.manager"
        manager_name = config.fleet_worker.manager
        manager = None if manager_name == stack else load(manager_name)
        if manager_name == stack:
            problems.append(f"{where}: got {stack!r}; a worker cannot be its own manager")
        elif manager is None:
            problems.append(
                f"{where}: got {manager_name!r}; unknown stack: "
                f"no stacks/Pulumi.{manager_name}.yaml (stacks: {', '.join(stacks())})"
            )
        elif isinstance(manager, StackConfig) and (
            manager.fleet is None or stack not in {w.stack for w in manager.fleet.workers}
        ):
            problems.append(
                f"{where}: got {manager_name!r}; that stack's fleet.workers does not list "
                f"{stack}: add it there, or name the manager that does"
            )
        reason = outside_uae(site_of(config))
        if reason:
            problems.append(f"{key}fleetWorker: this worker is not a UAE cluster: {reason}")
        if (
            config.site_link is not None
            and isinstance(manager, StackConfig)
            and manager.target != "onprem"
        ):
            problems.append(
                f"{key}siteLink: the manager {manager_name} is not an on-premises site: a "
                "site link (VPN, Direct Connect) joins this VPC to a site's own network"
            )
    return problems


def _worker_problems(
    manager: str, name: str, worker: StackConfig, where: str, burst_teams: tuple[str, ...]
) -> list[str]:
    problems: list[str] = []
    if worker.fleet_worker is None:
        problems.append(
            f"{where}: got {name!r}; that stack does not declare "
            f"`fleetWorker: {{manager: {manager}}}`"
        )
    elif worker.fleet_worker.manager != manager:
        problems.append(
            f"{where}: got {name!r}; that stack names {worker.fleet_worker.manager!r} as its "
            "manager: a worker has exactly one manager"
        )
    if worker.fleet is not None:
        back = manager in {w.stack for w in worker.fleet.workers}
        problems.append(
            f"{where}: got {name!r}; "
            + (
                f"cycle: {manager} -> {name} -> {manager}"
                if back
                else f"{name} is a fleet manager itself; fleets do not nest"
            )
        )
    reason = outside_uae(site_of(worker))
    if reason:
        problems.append(f"{where}: got {name!r}; a worker must be a UAE cluster: {reason}")
    worker_teams = {t.name for t in worker.teams}
    for team in burst_teams:
        if team not in worker_teams:
            problems.append(
                f"{where}: got {name!r}; bursting team {team!r} is not a team of {name}: "
                "MultiKueue needs the same namespace and LocalQueue there (add it to its teams)"
            )
    return problems


def worker_pools(worker: StackConfig, snapshot: PriceSnapshot) -> tuple[NodePoolProfile, ...]:
    """The worker's pools with the shapes the burst quota needs (on-premises: as
    declared; AWS: vCPUs, memory and GPUs from the price snapshot's instance shapes)."""
    if worker.target == "onprem":
        return worker.onprem_node_pools
    profiles = []
    for pool in worker.node_pools:
        shape = snapshot.instance_types.get(pool.instance_type or "")
        if shape is None:
            continue  # reported by `stacks.cost.price_problems`
        profiles.append(
            NodePoolProfile(
                name=pool.name,
                role=pool.role,
                instance_type=pool.instance_type,
                vcpus=shape.vcpus,
                memory_gib=shape.memory_gib,
                gpus_per_node=shape.gpus,
                gpu_sharing=pool.gpu_sharing,
                gpu_replicas=pool.gpu_replicas,
                min_size=pool.min_size,
                max_size=pool.max_size,
            )
        )
    return tuple(profiles)


def burst_quotas(
    config: StackConfig, workers: Mapping[str, StackConfig], snapshot: PriceSnapshot
) -> tuple[TeamBurstQuota, ...]:
    """Each bursting team's quota on the manager: the sum of its quotas on the workers."""
    assert config.fleet is not None
    teams = config.fleet.burst_teams or tuple(t.name for t in config.teams)
    quotas = []
    for team in teams:
        cpu = memory = gpus = 0
        for worker in workers.values():
            spec = next(t for t in worker.teams if t.name == team)
            for flavor in team_flavor_quotas(spec, worker_pools(worker, snapshot)):
                cpu, memory, gpus = cpu + flavor.cpu, memory + flavor.memory_gib, gpus + flavor.gpus
        quotas.append(TeamBurstQuota(team, cpu, memory, gpus))
    return tuple(quotas)


def manager_inputs(config: StackConfig, load: StackLoader = load_stack) -> FleetManagerInputs:
    """The manager's fleet: a StackReference per worker for its secret kubeconfig.

    Call only after `fleet_problems` found nothing."""
    assert config.fleet is not None
    workers: dict[str, StackConfig] = {}
    inputs = []
    for ref in config.fleet.workers:
        worker = load(ref.stack)
        assert isinstance(worker, StackConfig)
        workers[ref.stack] = worker
        reference = pulumi.StackReference(f"fleet-{ref.stack}", stack_name=ref.reference(PROJECT))
        kubeconfig = reference.require_output(KUBECONFIG_OUTPUT).apply(str)
        inputs.append(
            WorkerInputs(ref.stack, site_of(worker), kubeconfig, api_server_cidrs(worker))
        )
    return FleetManagerInputs(tuple(inputs), burst_quotas(config, workers, load_snapshot()))
