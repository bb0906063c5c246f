"""The Pulumi program: stack config -> typed config -> composition -> resources.

This is the only place that reads `pulumi.Config`; everything below it gets typed
arguments. A bad stack config ends the run with one clean message listing every
problem (``pulumi.RunError`` prints no traceback), before any cloud resource exists.
"""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from .aws_foundation import KeyStoreSecrets, build_aws_foundation, region_provider
from .config import PROJECT, parse_stack_config
from .config_parsing import ConfigError
from .cost import price_problems
from .fleet import fleet_problems
from .image_lock import LockError, load_lock, lock_path, pin_transformation
from .kubernetes_layer import build_kubernetes_layer
from .pricing import PricingError, load_snapshot, snapshot_path
from .state_residency import StateResidency, for_program


def stack_config_map() -> dict[str, str]:
    """Every config value of the running stack, as the engine passes them (strings)."""
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def main(state: StateResidency | None = None) -> None:
    """Build the platform for the selected stack.

    Args:
        state: the stack's state backend and secrets provider; the offline plan passes
            its own, a real run reads them (`stacks.state_residency.for_program`).
    """
    stack = pulumi.get_stack()
    state = state or for_program(stack)
    # Before any resource: a stack whose state or secrets would leave the UAE gets none
    # (RunError: one message, no traceback), reported together with config problems.
    refused = state.problems()
    if refused:
        try:
            parse_stack_config(stack_config_map())
        except ConfigError as err:
            raise pulumi.RunError(f"{err.render(stack)}\n{state.render(refused)}") from None
        raise pulumi.RunError(state.render(refused))
    pulumi.export("residency", state.as_output())
    try:
        config = parse_stack_config(stack_config_map())
        # The fleet topology (other stacks' files) and an onprem site's prices are
        # checked with the config, before any resource (AWS pools' prices are checked
        # with the instance catalog, in the foundation, before any AWS resource).
        try:
            snapshot = load_snapshot(snapshot_path(config.region))
        except PricingError as err:
            raise ConfigError([str(err)]) from None
        problems = fleet_problems(stack, config)
        if config.target == "onprem":
            problems += price_problems(config, snapshot)
        if problems:
            raise ConfigError(problems)
        pin_images(stack, config.require_image_digests)
        secrets = pulumi.Config(PROJECT)
        admin_password = secrets.get_secret("trackingAdminPassword")
        foundation = None
        if config.target == "aws":
            key_store_secrets = KeyStoreSecrets(
                key_store_password=secrets.get_secret("keyStorePassword"),
                xks_access_key_id=secrets.get_secret("xksProxyAccessKeyId"),
                xks_secret_access_key=secrets.get_secret("xksProxySecretAccessKey"),
            )
            foundation = build_aws_foundation(
                stack, config, region_provider(config), key_store_secrets, admin_password
            )
            if foundation is None:
                # Key custody before stage `keys`: no key exists yet, so nothing that
                # needs one (no cluster, no Kubernetes layer) is declared.
                return
        kubeconfig = secrets.get_secret("kubeconfig")
        build_kubernetes_layer(config, foundation, kubeconfig, admin_password)
    except ConfigError as err:
        raise pulumi.RunError(err.render(stack)) from None


def pin_images(stack: str, required: bool) -> None:
    """Register every Kubernetes object with its images pinned by the stack's image lock
    (`stacks.image_lock`), where it has one; ``required`` (``requireImageDigests``)
    makes a missing lock a configuration problem, before any resource."""
    try:
        lock = load_lock(stack)
    except LockError as err:
        raise ConfigError([str(err)]) from None
    if lock is None:
        if required:
            raise ConfigError(
                [
                    f"requireImageDigests: true, but {lock_path(stack).name} does not exist "
                    f"in stacks/images/: run `make pin-images STACK={stack}`"
                ]
            )
        return
    pulumi.runtime.register_stack_transformation(pin_transformation(lock, required))
