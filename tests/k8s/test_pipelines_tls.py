"""Kubeflow Pipelines' TLS inside the cluster: the API server serves HTTPS and gRPC over
TLS as KFP 2.17.0's own overlay configures it (its patches vendored in
``vendor/kubeflow-pipelines/tls``), the UI through a TLS proxy, the retrain trigger
serves HTTPS to Alertmanager, every client verifies with the cluster CA, and the API
server's liveness command restarts it after a renewal (run here against a real TLS
server with ``sh`` and ``wget``)."""

from __future__ import annotations

import shlex
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.k8s.names import CLUSTER_CA_ISSUER
from modules.k8s.pipelines import loop
from modules.k8s.pipelines import manifests as kfp
from modules.k8s.pipelines import spec as ps
from modules.k8s.pki.spec import CA_BUNDLE_SECRET, CA_KEY, service_dns_names
from modules.k8s.tracking.manifests import TLS_PROXY_IMAGE
from tests.k8s.test_pipelines import (
    AWS,
    ONPREM,
    ONPREM_SPEC,
    PIPELINE_STACKS,
    ROOT,
    SPEC,
    env,
    find,
    installed,
    ir_and_values,
    kfp_records,
)
from tests.k8s.vendored_crds import vendored_errors
from tests.support.certs import authority, server_secret

OVERLAY = Path(__file__).resolve().parent / "vendor" / "kubeflow-pipelines" / "tls"
NS = ps.NAMESPACE


def overlay(name: str) -> dict[str, Any]:
    return yaml.safe_load((OVERLAY / name).read_text())  # type: ignore[no-any-return]


def overlay_container(name: str) -> dict[str, Any]:
    (container,) = overlay(name)["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def image_command(dockerfile: str) -> str:
    """The ``sh -c`` string of an image's ``CMD ["/bin/sh", "-c", "..."]``."""
    (line,) = [
        ln for ln in (OVERLAY / dockerfile).read_text().splitlines() if ln.startswith("CMD ")
    ]
    command = yaml.safe_load(line[len("CMD ") :])
    assert command[:2] == ["/bin/sh", "-c"]
    return str(command[2])


def pod(name: str, objects: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects or installed(), "Deployment", name)["spec"]["template"][
        "spec"
    ]
    return spec


def container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in pod_spec["containers"] if c["name"] == name]
    return found  # type: ignore[no-any-return]


def mounted_secrets(pod_spec: dict[str, Any], c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mount path -> the Secret volume mounted there (with its items)."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    return {
        m["mountPath"]: volumes[m["name"]]["secret"]
        for m in c.get("volumeMounts", [])
        if "secret" in volumes[m["name"]]
    }


# -- the API server ----------------------------------------------------------------------


def test_the_api_server_runs_its_images_command_with_the_overlays_tls_flags() -> None:
    api = container(pod("ml-pipeline"), "ml-pipeline-api-server")
    shell, flag, script = api["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and "args" not in api
    copy, _, command = script.partition(" && exec ")
    assert copy == f"cat {kfp.TLS_DIR}/tls.crt > {kfp.SERVED_CERTIFICATE}"
    assert command.startswith(image_command("backend-Dockerfile.txt") + " ")
    ours = [a for a in shlex.split(command) if a.startswith("--tls")]
    theirs = [
        a
        for a in overlay_container("ml-pipeline-apiserver-deployment.yaml")["args"]
        if a.startswith("--tls")
    ]
    assert (
        ours
        == theirs
        == [
            "--tlsCertPath=/etc/pki/tls/certs/tls.crt",
            "--tlsCertKeyPath=/etc/pki/tls/certs/tls.key",
        ]
    )


def test_the_api_server_mounts_its_certificate_where_the_overlay_does() -> None:
    spec = pod("ml-pipeline")
    api = container(spec, "ml-pipeline-api-server")
    theirs = overlay_container("ml-pipeline-apiserver-deployment.yaml")["volumeMounts"][0]
    assert mounted_secrets(spec, api)[theirs["mountPath"]] == {"secretName": kfp.API_TLS_SECRET}
    # Go reads this directory as system roots: the REST gateway's TLS dial to its own
    # gRPC port verifies with them (manifests.TLS_DIR).
    assert theirs["mountPath"] == kfp.TLS_DIR == "/etc/pki/tls/certs"


def test_the_api_servers_probes_ask_over_https() -> None:
    api = container(pod("ml-pipeline"), "ml-pipeline-api-server")
    theirs = overlay_container("ml-pipeline-apiserver-deployment.yaml")
    assert api["readinessProbe"] == theirs["readinessProbe"]
    assert api["startupProbe"] == theirs["startupProbe"]
    assert api["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert api["livenessProbe"]["exec"]["command"] == kfp.api_server_liveness()


def test_runs_get_the_cluster_ca_bundle_not_the_servers_secret() -> None:
    api = container(pod("ml-pipeline"), "ml-pipeline-api-server")
    theirs = env(overlay_container("ml-pipeline-apiserver-deployment.yaml"))
    assert "CABUNDLE_SECRET_NAME" in theirs
    assert env(api)["CABUNDLE_SECRET_NAME"] == CA_BUNDLE_SECRET != kfp.API_TLS_SECRET
    # ML Metadata serves plain gRPC here: the drivers must not be told otherwise.
    assert "METADATA_TLS_ENABLED" in theirs and "METADATA_TLS_ENABLED" not in env(api)


def test_the_api_servers_service_is_the_overlays() -> None:
    service = find(installed(), "Service", kfp.API_SERVICE)
    (theirs,) = overlay("ml-pipeline-apiserver-service.yaml")["spec"]["ports"]
    (https,) = [p for p in service["spec"]["ports"] if p["port"] == kfp.API_HTTP_PORT]
    assert https == theirs
    assert service["metadata"]["annotations"]["prometheus.io/scheme"] == "https"
    grpc = [p for p in service["spec"]["ports"] if p["port"] == kfp.API_GRPC_PORT]
    assert len(grpc) == 1


# -- the API server's clients ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dockerfile", "patch"),
    [
        (
            "ml-pipeline-persistenceagent",
            "backend-Dockerfile.persistenceagent.txt",
            "ml-pipeline-persistenceagent-deployment.yaml",
        ),
        (
            "ml-pipeline-scheduledworkflow",
            "backend-Dockerfile.scheduledworkflow.txt",
            "ml-pipeline-scheduledworkflow-deployment.yaml",
        ),
    ],
)
def test_the_controllers_call_the_api_server_over_tls_with_the_cluster_ca(
    name: str, dockerfile: str, patch: str
) -> None:
    spec = pod(name)
    (controller,) = spec["containers"]
    shell, flag, command = controller["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and "args" not in controller
    assert command == f"{image_command(dockerfile)} {kfp.CLIENT_TLS_FLAGS}"
    theirs = overlay_container(patch)
    words = [*theirs["command"], *theirs.get("args", [])]
    upstream_flags = {
        f
        for w in words
        for f in shlex.split(w)
        if f.startswith(("-mlPipelineServiceTLS", "-caCert"))
    }
    assert set(shlex.split(kfp.CLIENT_TLS_FLAGS)) == upstream_flags
    # The CA only, where the overlay mounts its Secret; not the server's key.
    assert mounted_secrets(spec, controller)[kfp.TLS_DIR] == {
        "secretName": CA_BUNDLE_SECRET,
        "items": [{"key": CA_KEY, "path": CA_KEY}],
    }


def test_the_ui_calls_the_api_server_over_https_by_a_name_of_its_certificate() -> None:
    spec = pod("ml-pipeline-ui")
    ui = container(spec, "ml-pipeline-ui")
    ours, theirs = env(ui), env(overlay_container("ml-pipeline-ui-deployment.yaml"))
    for name in ("ML_PIPELINE_SERVICE_SCHEME", "ML_PIPELINE_SERVICE_HOST", "NODE_EXTRA_CA_CERTS"):
        assert ours[name] == theirs[name], name
    assert ours["ML_PIPELINE_SERVICE_SCHEME"] == "https"
    assert ours["ML_PIPELINE_SERVICE_PORT"] == str(kfp.API_HTTP_PORT)
    names = find(kfp.tls_objects(), "Certificate", kfp.API_TLS_SECRET)["spec"]["dnsNames"]
    assert ours["ML_PIPELINE_SERVICE_HOST"] in names
    assert ours["NODE_EXTRA_CA_CERTS"] == f"{kfp.TLS_DIR}/{CA_KEY}"
    assert mounted_secrets(spec, ui)[kfp.TLS_DIR]["secretName"] == CA_BUNDLE_SECRET


def test_the_api_server_certificate_holds_every_name_its_clients_use() -> None:
    certificate = find(kfp.tls_objects(), "Certificate", kfp.API_TLS_SECRET)
    names = set(certificate["spec"]["dnsNames"])
    assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    assert certificate["spec"]["secretName"] == kfp.API_TLS_SECRET
    # The overlay's names of the API server (ML Metadata's are left out: plain gRPC here).
    theirs = {
        n.replace("$(kfp-namespace)", NS)
        for n in overlay("kfp-api-cert.yaml")["spec"]["dnsNames"]
        if n == "localhost" or n.startswith("ml-pipeline.") or n == "ml-pipeline"
    }
    assert theirs <= names
    # The controllers' default (``ml-pipeline``), the UI's, the runs' (main.go's
    # ServerName and the drivers' address), the publisher's and trigger's.
    assert {
        "ml-pipeline",
        "ml-pipeline.kubeflow",
        "ml-pipeline.kubeflow.svc.cluster.local",
    } <= names
    assert loop.API_SERVER_URL.split("//")[1].split(":")[0] in names
    assert names == {*service_dns_names(kfp.API_SERVICE, NS), "localhost"}


def test_no_pod_but_the_server_mounts_a_server_key() -> None:
    owners = {
        kfp.API_TLS_SECRET: "ml-pipeline",
        kfp.UI_TLS_SECRET: "ml-pipeline-ui",
        loop.TRIGGER_TLS_SECRET: loop.TRIGGER,
    }
    ir, values = ir_and_values()
    for placement, spec in ((AWS, SPEC), (ONPREM, ONPREM_SPEC)):
        for o in [*installed(spec, placement), *loop.loop_objects(spec, placement, ir, values)]:
            if o["kind"] != "Deployment":
                continue
            for volume in o["spec"]["template"]["spec"].get("volumes", []):
                secret = volume.get("secret", {}).get("secretName")
                if secret in owners:
                    assert owners[secret] == o["metadata"]["name"], (secret, o["metadata"])


# -- the UI ------------------------------------------------------------------------------


def test_the_ui_is_served_through_its_tls_proxy() -> None:
    objects = installed()
    spec = pod("ml-pipeline-ui", objects)
    proxy = container(spec, "tls-proxy")
    assert proxy["image"] == AWS.image("ghostunnel")
    args = proxy["args"]
    assert args[0] == "server" and "--disable-authentication" in args
    assert f"--listen=0.0.0.0:{kfp.UI_TLS_PORT}" in args
    assert f"--target=127.0.0.1:{kfp.UI_PORT}" in args  # the UI on the pod's loopback
    assert "--timed-reload=1h" in args  # cert-manager's renewals are picked up
    assert mounted_secrets(spec, proxy)[kfp.UI_PROXY_TLS_DIR]["secretName"] == kfp.UI_TLS_SECRET
    assert proxy["securityContext"]["readOnlyRootFilesystem"] is True
    # 0440 files of the pod's group: the proxy (UID/GID 1000) reads the key.
    (volume,) = [
        v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == kfp.UI_TLS_SECRET
    ]
    assert volume["secret"]["defaultMode"] == 0o440
    assert spec["securityContext"]["fsGroup"] == proxy["securityContext"]["runAsGroup"]
    service = find(objects, "Service", kfp.UI_SERVICE)
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"], port["appProtocol"]) == (443, "https", "https")
    assert {"name": "https", "containerPort": kfp.UI_TLS_PORT, "protocol": "TCP"} in proxy["ports"]
    ui = container(spec, "ml-pipeline-ui")
    # The kubelet keeps probing the UI's own port (its health asks the API server).
    assert ui["readinessProbe"]["httpGet"]["port"] == kfp.UI_PORT
    names = find(kfp.tls_objects(), "Certificate", kfp.UI_TLS_SECRET)["spec"]["dnsNames"]
    assert set(names) == {*service_dns_names(kfp.UI_SERVICE, NS), "localhost"}


def test_the_proxy_is_the_tracking_servers_ghostunnel_release() -> None:
    source, tag = ps.MIRRORED_IMAGES["ghostunnel"]
    assert f"{source}:{tag}".removeprefix("docker.io/") == TLS_PROXY_IMAGE


def test_the_namespace_has_the_cluster_ca_bundle() -> None:
    bundle = find(kfp.tls_objects(), "Certificate", CA_BUNDLE_SECRET)
    assert bundle["metadata"]["namespace"] == NS
    assert bundle["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER


@pytest.mark.parametrize("stack", PIPELINE_STACKS)
def test_shipped_plans_serve_kfp_over_tls_from_the_cluster_ca(stack: str) -> None:
    records = kfp_records(stack)
    objects = [r.inputs for r in records]
    certificates = {
        o["spec"]["secretName"]: o
        for o in objects
        if o["kind"] == "Certificate" and o["metadata"]["namespace"] == NS
    }
    with_loop = (ROOT / ps.PIPELINE_FILE).is_file()
    trigger = {loop.TRIGGER_TLS_SECRET} if with_loop else set()
    assert set(certificates) == {kfp.API_TLS_SECRET, kfp.UI_TLS_SECRET, CA_BUNDLE_SECRET} | trigger
    for certificate in certificates.values():
        assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    # Registered before the Deployments, which mount their Secrets.
    by_name = {(r.inputs["kind"], r.inputs["metadata"]["name"]): r for r in records}
    certificate_urns = {
        r.urn
        for r in records
        if r.inputs["kind"] == "Certificate" and r.inputs["metadata"]["name"] not in trigger
    }
    for name in ("ml-pipeline", "ml-pipeline-ui", "ml-pipeline-persistenceagent"):
        assert certificate_urns <= set(by_name[("Deployment", name)].dependencies), name
    if with_loop:
        served = by_name[("Certificate", loop.TRIGGER_TLS_SECRET)].urn
        assert served in by_name[("Deployment", loop.TRIGGER)].dependencies
    api = container(
        by_name[("Deployment", "ml-pipeline")].inputs["spec"]["template"]["spec"],
        "ml-pipeline-api-server",
    )
    assert "--tlsCertPath=/etc/pki/tls/certs/tls.crt" in api["command"][2]


# -- the loop ----------------------------------------------------------------------------


def test_the_publisher_and_the_trigger_verify_the_api_server_with_the_cluster_ca() -> None:
    assert loop.API_SERVER_URL == "https://ml-pipeline.kubeflow.svc.cluster.local:8888"
    ir, _ = ir_and_values()
    job = loop.publish_job(SPEC, AWS, ir)
    deployment = find(loop.trigger_objects(SPEC, AWS, ir), "Deployment", loop.TRIGGER)
    for spec in (job["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]):
        (c,) = spec["containers"]
        options = dict(zip(c["args"][2::2], c["args"][3::2], strict=True))
        assert options["--host"] == loop.API_SERVER_URL
        assert options["--ca-cert"] == loop.CA_FILE == f"{loop.CA_MOUNT}/{CA_KEY}"
        assert mounted_secrets(spec, c)[loop.CA_MOUNT] == {
            "secretName": CA_BUNDLE_SECRET,
            "items": [{"key": CA_KEY, "path": CA_KEY}],
        }


def trigger_pod() -> dict[str, Any]:
    ir, _ = ir_and_values()
    return pod(loop.TRIGGER, loop.trigger_objects(SPEC, AWS, ir))


def test_the_trigger_has_a_certificate_from_the_cluster_ca_for_its_services_names() -> None:
    certificate = loop.trigger_certificate()
    assert certificate["metadata"]["namespace"] == NS
    assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    assert certificate["spec"]["secretName"] == loop.TRIGGER_TLS_SECRET
    assert "server auth" in certificate["spec"]["usages"]
    names = certificate["spec"]["dnsNames"]
    assert names == service_dns_names(loop.TRIGGER, NS)
    # Alertmanager checks the URL's host against them.
    assert loop.TRIGGER_URL.startswith("https://")
    assert loop.TRIGGER_URL.split("//")[1].split(":")[0] == names[0]
    ir, _ = ir_and_values()
    assert certificate in loop.trigger_objects(SPEC, AWS, ir)


def test_the_trigger_serves_its_certificate_read_only_and_is_probed_over_https() -> None:
    spec = trigger_pod()
    (trigger,) = spec["containers"]
    options = dict(zip(trigger["args"][2::2], trigger["args"][3::2], strict=True))
    assert options["--tls-cert"] == f"{loop.TRIGGER_TLS_MOUNT}/tls.crt"
    assert options["--tls-key"] == f"{loop.TRIGGER_TLS_MOUNT}/tls.key"
    # Only the served pair, 0440 to the pod's group; mounted whole (no subPath), so the
    # kubelet's renewal reaches the files the trigger re-reads.
    assert mounted_secrets(spec, trigger)[loop.TRIGGER_TLS_MOUNT] == {
        "secretName": loop.TRIGGER_TLS_SECRET,
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
        "defaultMode": 0o440,
    }
    (mount,) = [m for m in trigger["volumeMounts"] if m["mountPath"] == loop.TRIGGER_TLS_MOUNT]
    assert mount["readOnly"] is True and "subPath" not in mount
    assert spec["securityContext"]["fsGroup"] == trigger["securityContext"]["runAsGroup"]
    assert trigger["ports"] == [{"name": "https", "containerPort": loop.TRIGGER_PORT}]
    get = trigger["readinessProbe"]["httpGet"]
    assert (get["scheme"], get["port"], get["path"]) == ("HTTPS", "https", "/healthz")
    # The trigger answers one connection at a time and may wait on KFP: readiness has
    # more than the kubelet's 1 s default, and liveness only needs the socket to accept.
    assert trigger["readinessProbe"]["timeoutSeconds"] >= 5
    assert trigger["livenessProbe"] == {
        "tcpSocket": {"port": "https"},
        "periodSeconds": 20,
        "failureThreshold": 3,
    }
    ir, _ = ir_and_values()
    service = find(loop.trigger_objects(SPEC, AWS, ir), "Service", loop.TRIGGER)
    assert service["spec"]["ports"] == [
        {"name": "https", "port": loop.TRIGGER_PORT, "targetPort": "https", "appProtocol": "https"}
    ]


def test_alertmanager_verifies_the_trigger_with_the_cluster_ca_of_its_own_namespace() -> None:
    config = loop.alertmanager_config(SPEC)
    (receiver,) = config["spec"]["receivers"]
    (webhook,) = receiver["webhookConfigs"]
    assert webhook["url"] == loop.TRIGGER_URL
    tls = webhook["httpConfig"]["tlsConfig"]
    assert tls == {
        "ca": {"secret": {"name": CA_BUNDLE_SECRET, "key": CA_KEY}},
        "minVersion": "TLS13",
    }
    # The operator reads a referenced Secret from the AlertmanagerConfig's namespace:
    # the bundle is issued there.
    bundle = kfp.namespace_ca()
    assert config["metadata"]["namespace"] == bundle["metadata"]["namespace"] == NS
    assert bundle["spec"]["secretName"] == CA_BUNDLE_SECRET
    assert "insecureSkipVerify" not in tls
    assert vendored_errors([config]) == []


def test_the_crd_refuses_a_tls_field_it_does_not_have() -> None:
    """The check above can fail: the vendored CRD is strict about these fields."""
    config = loop.alertmanager_config(SPEC)
    tls = config["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["tlsConfig"]
    tls["caFile"] = "/etc/ca.crt"
    assert vendored_errors([config]) != []
    del tls["caFile"]
    tls["minVersion"] = "TLSv1.3"
    assert vendored_errors([config]) != []


# -- the API server's liveness command, run ----------------------------------------------


@contextmanager
def tls_server(secret: Path) -> Iterator[int]:
    """An HTTPS server on 127.0.0.1 answering the health path with the certificate in
    ``secret`` (read once, at start, as KFP's API server does); its port."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == kfp.HEALTHZ_PATH
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(secret / "tls.crt", secret / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def started(secret: Path, served: Path) -> None:
    """What the API server's command does before ``exec``: copy the certificate."""
    copy, _, _ = kfp.api_server_command(str(secret), str(served)).partition(" && exec ")
    subprocess.run(["/bin/sh", "-c", copy], check=True, timeout=10)


def alive(secret: Path, served: Path, port: int) -> bool:
    command = kfp.api_server_liveness(str(secret), str(served), port)
    result = subprocess.run(command, check=False, capture_output=True, timeout=30)
    return result.returncode == 0


@pytest.mark.skipif(shutil.which("wget") is None, reason="needs wget, as the API server image has")
def test_the_liveness_command_passes_then_fails_after_a_renewal(tmp_path: Path) -> None:
    ca = authority()
    secret = server_secret(tmp_path / "kfp-api-tls", ca, ["localhost"])
    served = tmp_path / "served-tls.crt"
    started(secret, served)
    with tls_server(secret) as port:
        assert alive(secret, served, port)
        # cert-manager renews: the Secret's files change, the server still has the old one.
        server_secret(secret, ca, ["localhost"])
        assert not alive(secret, served, port)
        started(secret, served)  # what a container restart does
        assert alive(secret, served, port)


@pytest.mark.skipif(shutil.which("wget") is None, reason="needs wget, as the API server image has")
def test_the_liveness_command_fails_on_a_certificate_the_cluster_ca_did_not_sign(
    tmp_path: Path,
) -> None:
    served_secret = server_secret(tmp_path / "served", authority("another CA"), ["localhost"])
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for name in ("tls.crt", "tls.key"):
        (mounted / name).write_bytes((served_secret / name).read_bytes())
    (mounted / "ca.crt").write_bytes(authority().pem)
    served = tmp_path / "served-tls.crt"
    started(mounted, served)
    with tls_server(served_secret) as port:
        assert not alive(mounted, served, port)
