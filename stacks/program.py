"""The Pulumi program: stack config -> typed config -> composition -> resources.

This is the only place that reads `pulumi.Config`; everything below it gets typed
arguments. A bad stack config ends the run with one clean message listing every
problem (``pulumi.RunError`` prints no traceback), before any cloud resource exists.
"""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from .aws_foundation import build_aws_foundation, region_provider
from .config import PROJECT, parse_stack_config
from .config_parsing import ConfigError
from .cost import price_problems
from .fleet import fleet_problems
from .kubernetes_layer import build_kubernetes_layer
from .pricing import PricingError, load_snapshot, snapshot_path


def stack_config_map() -> dict[str, str]:
    """Every config value of the running stack, as the engine passes them (strings)."""
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def main() -> None:
    """Build the platform for the selected stack."""
    stack = pulumi.get_stack()
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
        foundation = None
        if config.target == "aws":
            foundation = build_aws_foundation(stack, config, region_provider(config))
        kubeconfig = pulumi.Config(PROJECT).get_secret("kubeconfig")
        build_kubernetes_layer(config, foundation, kubeconfig)
    except ConfigError as err:
        raise pulumi.RunError(err.render(stack)) from None
