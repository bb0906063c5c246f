"""Upload a compiled pipeline to Kubeflow Pipelines and keep its one recurring run.

The cluster's publisher Job runs it (`modules.k8s.pipelines.loop.publish_job`)::

    python -m workloads.pipelines.publish --host https://ml-pipeline.kubeflow...:8888 \\
        --ca-cert /etc/gpuplatform-ca/ca.crt --package pipeline.yaml \\
        --parameters parameters.json --pipeline data-to-model \\
        --version data-to-model-<digest> --experiment data-to-model \\
        --recurring-run data-to-model-schedule --schedule "0 0 2 * * 0"

Idempotent, so the Job may run again: the version is uploaded only when no version
of that name exists; the recurring run is kept when it already runs that version on
that schedule with those parameters, and otherwise replaced (the old one deleted, a
new one created). An empty ``--schedule`` removes it.

Exit codes: 0 done; 1 KFP's API failed or is unreachable (one line on stderr; the Job
retries); 2 bad arguments or files.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import kfp
import kfp_server_api
import urllib3

from workloads.pipelines.kfp_api import (
    LoopError,
    api_failure,
    check_ca_cert,
    client,
    read_parameters,
    versions,
)


@dataclass(frozen=True)
class Published:
    """What `publish` did (printed as one JSON line)."""

    pipeline_id: str
    version_id: str
    version_uploaded: bool
    recurring_run_id: str | None
    recurring_runs_deleted: list[str]


def _recurring_runs(api: kfp.Client, experiment_id: str, name: str) -> list[Any]:
    found: list[Any] = []
    token = ""
    while True:
        page = api.list_recurring_runs(page_token=token, page_size=100, experiment_id=experiment_id)
        found += [r for r in page.recurring_runs or [] if r.display_name == name]
        token = page.next_page_token or ""
        if not token:
            return found


def _current(run: Any, version_id: str, schedule: str, parameters: dict[str, Any]) -> bool:
    """True when a recurring run already does what is asked."""
    reference = run.pipeline_version_reference
    cron = run.trigger.cron_schedule.cron if run.trigger and run.trigger.cron_schedule else None
    given = (run.runtime_config.parameters or {}) if run.runtime_config else {}
    return (
        reference is not None
        and reference.pipeline_version_id == version_id
        and cron == schedule
        and str(run.status) == "ENABLED"
        and given == parameters
    )


def publish(
    api: kfp.Client,
    *,
    package: Path,
    pipeline: str,
    version: str,
    experiment: str,
    recurring_run: str,
    schedule: str,
    parameters: dict[str, Any],
) -> Published:
    """Upload ``package`` as version ``version`` of ``pipeline`` and set its recurring run.

    Args:
        api: the KFP SDK's client.
        package: the compiled IR YAML.
        pipeline: the pipeline's name in KFP.
        version: the version's name (the platform derives it from the IR's digest).
        experiment: the experiment the recurring run files its runs under.
        recurring_run: the recurring run's name (one per pipeline).
        schedule: KFP's six-field cron; empty for no recurring run.
        parameters: the runs' parameters.
    """
    pipeline_id = api.get_pipeline_id(pipeline)
    if pipeline_id is None:
        # KFP creates the pipeline with a first version named after it; the named
        # version below is the one the loop runs.
        pipeline_id = api.upload_pipeline(
            str(package),
            pipeline_name=pipeline,
            description="Raw data to a served model (workloads/pipelines)",
        ).pipeline_id
    existing = [v for v in versions(api, pipeline_id) if v.display_name == version]
    uploaded = not existing
    if existing:
        version_id = existing[0].pipeline_version_id
    else:
        version_id = api.upload_pipeline_version(
            str(package), pipeline_version_name=version, pipeline_id=pipeline_id
        ).pipeline_version_id
    experiment_id = api.create_experiment(experiment).experiment_id
    keep, deleted = None, []
    for run in _recurring_runs(api, experiment_id, recurring_run):
        if keep is None and schedule and _current(run, version_id, schedule, parameters):
            keep = run.recurring_run_id
            continue
        api.delete_recurring_run(run.recurring_run_id)
        deleted.append(run.recurring_run_id)
    if schedule and keep is None:
        keep = api.create_recurring_run(
            experiment_id=experiment_id,
            job_name=recurring_run,
            description=f"{pipeline} on {schedule} (UTC)",
            cron_expression=schedule,
            # One run at a time; a schedule missed while KFP was down is not caught up.
            max_concurrency=1,
            no_catchup=True,
            params=parameters,
            pipeline_id=pipeline_id,
            version_id=version_id,
        ).recurring_run_id
    return Published(pipeline_id, version_id, uploaded, keep, deleted)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.pipelines.publish")
    parser.add_argument("--host", required=True, help="KFP's API server URL")
    parser.add_argument(
        "--ca-cert", type=Path, help="the CA that signed the API server's certificate (PEM)"
    )
    parser.add_argument("--package", required=True, type=Path, help="compiled IR YAML")
    parser.add_argument("--parameters", required=True, type=Path, help="run parameters (JSON)")
    parser.add_argument("--pipeline", required=True, help="the pipeline's name in KFP")
    parser.add_argument("--version", required=True, help="the version's name")
    parser.add_argument("--experiment", required=True, help="the recurring run's experiment")
    parser.add_argument("--recurring-run", required=True, help="the recurring run's name")
    parser.add_argument("--schedule", default="", help="KFP six-field cron; empty for none")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        if not args.package.is_file():
            raise LoopError(f"{args.package}: no compiled pipeline there")
        check_ca_cert(args.host, args.ca_cert)
        parameters = read_parameters(args.parameters)
    except LoopError as err:
        print(f"publish: {err}", file=sys.stderr)
        return 2
    try:
        published = publish(
            client(args.host, args.ca_cert),
            package=args.package,
            pipeline=args.pipeline,
            version=args.version,
            experiment=args.experiment,
            recurring_run=args.recurring_run,
            schedule=args.schedule,
            parameters=parameters,
        )
    except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
        print(f"publish: {api_failure(err, args.host)}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(published), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
