"""``python -m workloads.features <command>`` (``make features`` runs ``run``).

Commands:

- ``run``: the whole example on this machine, each step printed: generate the data,
  apply the feature repository, materialise, train, export to ONNX (parity checked),
  track and register in MLflow, serve the registered version over V2 on 127.0.0.1,
  ask for one prediction by entity key, stop the server;
- ``materialize``: load the newest feature values of the working directory's sources
  into its online store (after changing a source);
- ``serve``: the V2 model server for a model directory and a feature repository (what
  the predictor image runs; KServe's ``--model_dir``/``--http_port`` spellings work);
- ``bench``: online lookup latency, predictor latency with the lookup, and ONNX
  Runtime against LightGBM throughput (BENCHMARKS.md);
- ``publish``, ``apply``, ``train``: the cluster's steps against an offline store in the
  stack's bucket (`workloads.features.cluster`): write the example's data there,
  register the repository in the cluster's registry, and the training job (a TrainJob).

Every user error is one message on stderr and exit status 2; nothing outside the
working directory is written, and a working directory this command did not make is
never used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from workloads.features.server import (
    HOST,
    UsageError,
    check_port,
    free_port,
    http_json,
    running_server,
)

EXIT_OK = 0
EXIT_USER_ERROR = 2
DEFAULT_WORKDIR = Path("build/features")
MARKER = ".workloads-features"
#: Fewer weekly snapshots than this leave no label event a 30-day outcome (the data
#: generator refuses them too: `workloads.features.data.generate`).
MIN_WEEKS = 6
#: The CA bundle MLflow's client verifies an HTTPS tracking server with.
TLS_CA_ENV = "MLFLOW_TRACKING_SERVER_CERT_PATH"


def say(step: str, message: str) -> None:
    print(f"features [{step}] {message}", flush=True)


def quiet() -> None:
    """Feast's and MLflow's chatter off: the steps print what matters. Feast installs
    its own warning filters at import, so they are imported first and overridden."""
    os.environ.setdefault("FEAST_USAGE", "False")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import feast  # noqa: PLC0415
    import feast.batch_feature_view  # noqa: F401, PLC0415

    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.ERROR)
    for name in ("feast", "mlflow", "alembic", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)


def at_least(args: argparse.Namespace, **lowest: float) -> None:
    """Each named argument is at least its ``lowest`` value; one message naming every one
    that is not. Checked first: before anything is written or a slow import starts."""
    problems = [
        f"--{name.replace('_', '-')} must be at least {low:g}, got {getattr(args, name)}"
        for name, low in lowest.items()
        if getattr(args, name) < low
    ]
    if problems:
        raise UsageError("; ".join(problems))


def check_tracking_uri(uri: str, *, answers: bool = True) -> None:
    """A tracking URI MLflow can use without writing anywhere unasked: an HTTP(S) server
    (when ``answers``: one that answers MLflow's ``/health`` now, not after training), or
    a database URI (``sqlite:///<path>`` in an existing folder, ``postgresql://``...).
    A bare path would make MLflow write a file store wherever it points."""
    hint = (
        "give an MLflow server (http://127.0.0.1:5000, started with `make track`) or leave "
        "TRACKING_URI unset for the local store under the working directory"
    )
    scheme = urlparse(uri).scheme
    if not scheme or "://" not in uri:
        raise UsageError(f"the tracking URI {uri!r} is not a URI; {hint}")
    if scheme == "sqlite":
        folder = Path(uri.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise UsageError(f"the tracking URI {uri!r}: its database's folder {folder} is missing")
    if scheme not in ("http", "https") or not answers:
        return  # MLflow's database stores (postgresql://...) answer when first used
    # MLflow's own TLS settings, as its client will use them.
    context = ssl.create_default_context(cafile=os.environ.get(TLS_CA_ENV) or None)
    try:
        with urllib.request.urlopen(
            f"{uri.rstrip('/')}/health", timeout=10, context=context
        ) as answer:
            healthy = answer.status == 200
    except (OSError, ValueError):  # refused, unknown host, TLS, HTTP errors (all URLError)
        healthy = False
    if not healthy:
        raise UsageError(f"no MLflow tracking server answers at {uri} (its /health); {hint}")


def prepare_workdir(workdir: Path) -> None:
    """Create ``workdir`` or reuse one this command made; refuse anything else."""
    if workdir.exists():
        if not workdir.is_dir():
            raise UsageError(f"{workdir} is a file; give a directory with --workdir (WORKDIR=)")
        if any(workdir.iterdir()) and not (workdir / MARKER).is_file():
            raise UsageError(
                f"{workdir} exists and was not made by this command; it is left alone. "
                "Give an empty or new directory with --workdir (make features WORKDIR=...)"
            )
    try:
        (workdir / "repo").mkdir(parents=True, exist_ok=True)
        (workdir / MARKER).write_text("made by python -m workloads.features\n")
    except OSError as err:
        raise UsageError(f"cannot create {workdir} ({err.strerror})") from err


def require_workdir(workdir: Path) -> None:
    if not (workdir / MARKER).is_file() or not (workdir / "repo" / "feature_store.yaml").is_file():
        raise UsageError(
            f"{workdir} holds no applied feature repository; run `make features` "
            "(python -m workloads.features run) first"
        )


def open_local_store(workdir: Path) -> Any:
    from feast import FeatureStore  # noqa: PLC0415 - slow import

    return FeatureStore(repo_path=str(workdir / "repo"))


def materialize(workdir: Path) -> tuple[datetime, datetime]:
    """Load the newest value per customer of every source row up to now."""
    import pandas as pd  # noqa: PLC0415

    from workloads.features.data import ACTIVITY_FILE, PROFILE_FILE  # noqa: PLC0415

    firsts = [
        pd.read_parquet(workdir / "data" / name, columns=["event_timestamp"])[
            "event_timestamp"
        ].min()
        for name in (PROFILE_FILE, ACTIVITY_FILE)
    ]
    start = min(firsts).to_pydatetime() - timedelta(seconds=1)
    end = datetime.now(UTC)
    with contextlib.redirect_stdout(io.StringIO()):  # Feast's progress lines
        open_local_store(workdir).materialize(start_date=start, end_date=end)
    return start, end


def run(args: argparse.Namespace) -> int:
    """``make features``: every step of the example, printed."""
    workdir: Path = args.workdir
    # Every argument first, then the working directory: a refusal needs none of the
    # slow imports and leaves nothing behind.
    at_least(args, customers=1, weeks=MIN_WEEKS, seed=0, threads=1)
    check_port(args.port, free_one=True)
    if args.tracking_uri:
        check_tracking_uri(args.tracking_uri)
    prepare_workdir(workdir)
    started = time.perf_counter()
    quiet()
    from workloads.features import data, model, repo, track  # noqa: PLC0415

    dataset = data.generate(customers=args.customers, weeks=args.weeks, seed=args.seed)
    paths = dataset.write(workdir / "data")
    say(
        "data",
        f"{len(dataset.profiles)} profile rows, {len(dataset.activity)} activity snapshots, "
        f"{len(dataset.labels)} label events ({args.customers} customers, seed {args.seed}) "
        f"-> {paths['activity'].parent}",
    )

    # A whole Feast repository: its configuration and its definitions file (what Feast's
    # CLI reads there), and the same objects applied to its registry.
    data_dir = (workdir / "data").resolve()
    (workdir / "repo" / "feature_store.yaml").write_text(repo.feature_store_yaml(workdir))
    (workdir / "repo" / repo.DEFINITIONS_FILE).write_text(repo.definitions_file(data_dir))
    store = open_local_store(workdir)
    with contextlib.redirect_stdout(io.StringIO()):  # Feast's lines of what it applied
        repo.apply_as_feast_cli(store, repo.definitions(data_dir))
    say(
        "apply",
        f"project {repo.PROJECT}: entity {repo.ENTITY}, feature views {repo.PROFILE_VIEW}, "
        f"{repo.ACTIVITY_VIEW}, on-demand {repo.RATIOS_VIEW}, service {repo.FEATURE_SERVICE} "
        f"(registry {workdir / 'repo' / 'registry.db'}, definitions "
        f"{workdir / 'repo' / repo.DEFINITIONS_FILE})",
    )

    start, end = materialize(workdir)
    say("materialize", f"{start:%Y-%m-%d} .. {end:%Y-%m-%d %H:%M} UTC -> SQLite online store")

    training = model.training_set(store, dataset.labels)
    dropped = training.requested - len(training.frame)
    say(
        "train",
        f"point-in-time retrieval: {len(training.frame)} of {training.requested} label events "
        f"with every feature ({dropped} had none yet); training on {len(training.y_train)} "
        f"before {training.cutoff:%Y-%m-%d}, validating on {len(training.y_valid)} after",
    )
    classifier, metrics = model.train(training, seed=args.seed, threads=args.threads)
    say(
        "train",
        f"LightGBM {model.PARAMS['n_estimators']} trees: validation AUC "
        f"{metrics['valid_auc']:.3f}, log loss {metrics['valid_log_loss']:.3f} "
        f"(churn rate {metrics['valid_churn_rate']:.1%})",
    )

    onnx_bytes, parity = model.export_onnx(classifier, training.x_valid)
    card = model.model_card(
        metrics=metrics,
        parity=parity,
        data_seed=args.seed,
        project=repo.PROJECT,
        service=repo.FEATURE_SERVICE,
    )
    export_dir = workdir / "model"
    model.write_export(export_dir, classifier, onnx_bytes, card)
    say(
        "export",
        f"{export_dir / model.ONNX_FILE}: ONNX (opset {model.ONNX_OPSET}); parity on "
        f"{parity.rows} rows: max |p_onnx - p_lightgbm| = {parity.max_abs_diff:.2g} "
        f"<= bound {parity.bound:.2g}",
    )

    uri = args.tracking_uri or track.local_tracking_uri(workdir)
    registered = track.register(
        tracking_uri=uri,
        workdir=workdir,
        export_dir=export_dir,
        card=card,
        example=training.x_valid[:5],
        params={"seed": args.seed, "customers": args.customers, "weeks": args.weeks},
    )
    say(
        "register",
        f"run {registered.run_id} -> {registered.model_uri} (ONNX flavor, signature, input "
        f"example) on {uri}",
    )

    served = track.download(uri, registered.model_uri, workdir / "served" / registered.version)
    port = args.port or free_port()
    say("serve", f"{registered.model_uri} ({served}) on http://{HOST}:{port} (V2)")
    customer = int(dataset.activity["customer_id"].iloc[0])
    with running_server(
        served, workdir / "repo", port, track.MODEL_NAME, workdir / "server.log"
    ) as url:
        body = {
            "inputs": [
                {"name": repo.JOIN_KEY, "datatype": "INT64", "shape": [1], "data": [customer]}
            ]
        }
        answer = http_json(f"{url}/v2/models/{track.MODEL_NAME}/infer", body)
        outputs = {o["name"]: o["data"] for o in answer["outputs"]}
        values = ", ".join(
            f"{name}={value:g}"
            for name, value in zip(repo.MODEL_FEATURES, outputs["features"], strict=True)
        )
        say(
            "predict",
            f"POST /v2/models/{track.MODEL_NAME}/infer {repo.JOIN_KEY}={customer}: churn "
            f"probability {outputs['churn_probability'][0]:.4f} "
            f"(version {answer['model_version']}) from online features {values}",
        )
    say("done", f"server stopped; all steps in {time.perf_counter() - started:.0f} s")
    return EXIT_OK


def serve(args: argparse.Namespace) -> int:
    """The V2 model server (foreground)."""
    at_least(args, threads=0, max_in_flight=1, max_body_bytes=1)
    if not args.timeout_s > 0:
        raise UsageError(f"--timeout-s must be above 0, got {args.timeout_s}")
    check_port(args.port, args.host)
    from workloads.features.errors import ModelError  # noqa: PLC0415
    from workloads.features.model import check_features, read_card  # noqa: PLC0415

    # The model directory first: a wrong one is one message at once, not after the
    # seconds Feast and KServe take to import (the predictor checks it again on load).
    try:
        check_features(read_card(args.model_dir))
    except ModelError as err:
        raise UsageError(str(err)) from err
    quiet()
    from workloads.features.predictor import TabularPredictor  # noqa: PLC0415
    from workloads.serving.app import serve_models  # noqa: PLC0415
    from workloads.serving.limits import Limits  # noqa: PLC0415

    predictor = TabularPredictor(args.model_name, args.model_dir, args.feature_repo, args.threads)
    try:
        predictor.load()
    except ModelError as err:
        raise UsageError(str(err)) from err
    limits = Limits(args.max_body_bytes, args.max_in_flight, args.timeout_s)
    print(
        f"serving {args.model_name} (version {predictor.version}) at "
        f"http://{args.host}:{args.port}/v2/models/{args.model_name}/infer",
        flush=True,
    )
    try:
        asyncio.run(serve_models([predictor], args.host, args.port, limits))
    except OSError as err:
        raise UsageError(f"cannot listen on {args.host}:{args.port} ({err.strerror})") from err
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def materialize_command(args: argparse.Namespace) -> int:
    require_workdir(args.workdir)
    quiet()
    start, end = materialize(args.workdir)
    say("materialize", f"{start:%Y-%m-%d} .. {end:%Y-%m-%d %H:%M} UTC -> online store")
    return EXIT_OK


def bench_command(args: argparse.Namespace) -> int:
    at_least(args, requests=1, rows=1, threads=1)
    require_workdir(args.workdir)
    quiet()
    from workloads.features import bench  # noqa: PLC0415

    return bench.main(args)


def offline_store(args: argparse.Namespace) -> Any:
    from workloads.features.offline import OfflineStore  # noqa: PLC0415

    uri: str = args.offline_uri
    if not uri.startswith("s3://") and "://" in uri:
        raise UsageError(f"--offline-uri must be a directory or s3://bucket/prefix, not {uri}")
    return OfflineStore(uri, args.s3_endpoint, getattr(args, "kms_key_id", ""))


def publish_command(args: argparse.Namespace) -> int:
    at_least(args, customers=1, weeks=MIN_WEEKS, seed=0)
    quiet()
    from workloads.features import cluster  # noqa: PLC0415

    cluster.publish(
        offline_store(args), customers=args.customers, weeks=args.weeks, seed=args.seed, say=say
    )
    return EXIT_OK


def apply_command(args: argparse.Namespace) -> int:
    quiet()
    from workloads.features import cluster  # noqa: PLC0415

    cluster.apply(args.repo, offline_store(args), say)
    return EXIT_OK


def train_command(args: argparse.Namespace) -> int:
    at_least(args, seed=0, threads=1)
    store = offline_store(args)
    if not args.tracking_uri:
        raise UsageError("give the MLflow tracking server: --tracking-uri (MLFLOW_TRACKING_URI)")
    # The form only: the job's own run reports a server it cannot reach.
    check_tracking_uri(args.tracking_uri, answers=False)
    prepare_workdir(args.workdir)
    from workloads.features import cluster  # noqa: PLC0415

    labels_uri = args.labels or store.path("labels.parquet")
    # The label events first: a missing file is one message at once, not after the
    # seconds Feast, MLflow and LightGBM take to import.
    labels = cluster.read_labels(store, labels_uri)
    quiet()
    cluster.train(
        store,
        labels=labels,
        labels_uri=labels_uri,
        workdir=args.workdir,
        tracking_uri=args.tracking_uri,
        seed=args.seed,
        threads=args.threads,
        say=say,
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.features",
        description="The SMB churn example: Feast features, LightGBM, ONNX, MLflow, V2 serving.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def workdir_arg(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--workdir",
            type=Path,
            default=DEFAULT_WORKDIR,
            help="working directory (build/features)",
        )

    run_p = commands.add_parser("run", help="every step, printed (make features)")
    workdir_arg(run_p)
    run_p.add_argument("--customers", type=int, default=1500, help="customers to generate (1500)")
    run_p.add_argument("--weeks", type=int, default=26, help="weekly snapshots (26)")
    run_p.add_argument("--seed", type=int, default=7, help="seed of the data and the model (7)")
    run_p.add_argument("--threads", type=int, default=2, help="LightGBM threads (2)")
    run_p.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", ""),
        help="MLflow tracking URI (default: a SQLite store under the working directory)",
    )
    run_p.add_argument("--port", type=int, default=0, help="server port (0: a free one)")
    run_p.set_defaults(handler=run)

    mat_p = commands.add_parser("materialize", help="load the newest values into the online store")
    workdir_arg(mat_p)
    mat_p.set_defaults(handler=materialize_command)

    serve_p = commands.add_parser("serve", help="the V2 model server")
    serve_p.add_argument(
        "--model-dir", "--model_dir", type=Path, required=True, help="an export or MLflow model"
    )
    serve_p.add_argument("--model-name", "--model_name", default="smb-churn", help="V2 name")
    serve_p.add_argument(
        "--feature-repo", type=Path, help="Feast repository (feature_store.yaml) for lookups"
    )
    serve_p.add_argument("--host", default=HOST, help="address to bind (127.0.0.1)")
    serve_p.add_argument("--port", "--http_port", type=int, default=8080, help="port (8080)")
    serve_p.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads (1)")
    serve_p.add_argument("--max-in-flight", type=int, default=64, help="requests before 429")
    serve_p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest body")
    serve_p.add_argument("--timeout-s", type=float, default=30.0, help="per-request timeout")
    serve_p.set_defaults(handler=serve)

    bench_p = commands.add_parser("bench", help="lookup/predictor latency, ORT vs LightGBM")
    workdir_arg(bench_p)
    bench_p.add_argument("--requests", type=int, default=2000, help="timed requests per figure")
    bench_p.add_argument("--rows", type=int, default=20000, help="rows per throughput batch")
    bench_p.add_argument("--threads", type=int, default=1, help="threads of both runtimes (1)")
    bench_p.add_argument("--record", type=Path, help="append the table to this Markdown file")
    bench_p.set_defaults(handler=bench_command)

    def offline_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--offline-uri",
            required=True,
            help="the offline store: s3://<bucket>/features on AWS, or a directory",
        )
        sub.add_argument(
            "--s3-endpoint",
            default=os.environ.get("FEATURES_S3_ENDPOINT", ""),
            help="S3 endpoint, the region's (https://s3.<region>.amazonaws.com)",
        )

    pub_p = commands.add_parser("publish", help="write the example's data to an offline store")
    offline_args(pub_p)
    pub_p.add_argument("--kms-key-id", default="", help="SSE-KMS key (default: the bucket's)")
    pub_p.add_argument("--customers", type=int, default=1500, help="customers (1500)")
    pub_p.add_argument("--weeks", type=int, default=26, help="weekly snapshots (26)")
    pub_p.add_argument("--seed", type=int, default=7, help="seed of the data (7)")
    pub_p.set_defaults(handler=publish_command)

    apply_p = commands.add_parser("apply", help="register the repository in a store's registry")
    offline_args(apply_p)
    apply_p.add_argument(
        "--repo", type=Path, required=True, help="directory with the store's feature_store.yaml"
    )
    apply_p.set_defaults(handler=apply_command)

    train_p = commands.add_parser("train", help="train from an offline store, register in MLflow")
    offline_args(train_p)
    train_p.add_argument("--labels", default="", help="label events (<offline-uri>/labels.parquet)")
    train_p.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", ""),
        help="MLflow tracking server (MLFLOW_TRACKING_URI)",
    )
    train_p.add_argument(
        "--workdir",
        type=Path,
        default=Path("build/features-train"),
        help="working directory (build/features-train)",
    )
    train_p.add_argument("--seed", type=int, default=7, help="seed of the model (7)")
    train_p.add_argument("--threads", type=int, default=2, help="LightGBM threads (2)")
    train_p.set_defaults(handler=train_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from workloads.features.errors import ModelError, TrackingError  # noqa: PLC0415

    try:
        code: int = args.handler(args)
    except (UsageError, ModelError, TrackingError) as err:
        print(f"features: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except urllib.error.URLError as err:
        print(f"features: the model server did not answer ({err})", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:
        print(f"features: {err.filename or ''}: {err.strerror}", file=sys.stderr)
        return EXIT_USER_ERROR
    return code


if __name__ == "__main__":
    sys.exit(main())
