"""Kubeflow Pipelines' TLS inside the cluster: the API server serves HTTPS and gRPC over
TLS as KFP 2.17.0's own overlay configures it (vendored with upstream's manifests in
``modules/k8s/pipelines/upstream``), the UI and the retrain trigger through the
platform's TLS proxy (ghostunnel), every client verifies with the cluster CA, and the
servers' commands and liveness commands, as the render has them, restart them after a
renewal (run here against real TLS servers with ``sh``, ``bash`` and ``wget``)."""

from __future__ import annotations

import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from modules.k8s.names import CLUSTER_CA_ISSUER
from modules.k8s.pipelines import loop
from modules.k8s.pipelines import manifests as kfp
from modules.k8s.pipelines import spec as ps
from modules.k8s.pki.spec import CA_BUNDLE_SECRET, CA_KEY, service_dns_names
from modules.k8s.tracking.manifests import MIRRORED_IMAGES as TRACKING_IMAGES
from tests.k8s.test_pipelines import (
    AWS,
    KUSTOMIZE,
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

CERT_MANAGER = KUSTOMIZE / "env" / "cert-manager"
OVERLAY = CERT_MANAGER / "platform-agnostic-standalone-tls" / "patches"
DOCKERFILES = Path(__file__).resolve().parent / "vendor" / "kubeflow-pipelines" / "tls"
NS = ps.NAMESPACE
#: What the patches set (kustomize/patches/), as the tests expect it.
TLS_DIR = "/etc/pki/tls/certs"  # the overlay's certificate (servers) or CA (clients) mount
SERVED_CERTIFICATE = "/tmp/served-tls.crt"  # the copy a server keeps of what it serves
API_HTTP_PORT, API_GRPC_PORT = 8888, 8887
HEALTHZ_PATH = "/apis/v1beta1/healthz"
UI_PORT, UI_TLS_PORT, UI_PROXY_TLS_DIR = 3000, 3443, "/etc/ghostunnel/tls"
MLMD_PORT, MLMD_CONFIG_DIR = 8080, "/run/mlmd"
ENVOY_PORT, ENVOY_TLS_DIR = 9090, "/etc/envoy-tls"
CLIENT_TLS_FLAGS = f"-mlPipelineServiceTLSEnabled=true -caCertPath={TLS_DIR}/{CA_KEY}"
TRIGGER_PORT, TRIGGER_TLS_PORT = 8080, 8443


def overlay(name: str) -> dict[str, Any]:
    return yaml.safe_load((OVERLAY / name).read_text())  # type: ignore[no-any-return]


def api_cert() -> dict[str, Any]:
    """The overlay's certificate of the API server and ML Metadata."""
    return yaml.safe_load((CERT_MANAGER / "base-tls-certs" / "kfp-api-cert.yaml").read_text())  # type: ignore[no-any-return]


def overlay_container(name: str) -> dict[str, Any]:
    (container,) = overlay(name)["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def image_command(dockerfile: str) -> str:
    """The ``sh -c`` string of an image's ``CMD ["/bin/sh", "-c", "..."]``."""
    (line,) = [
        ln for ln in (DOCKERFILES / dockerfile).read_text().splitlines() if ln.startswith("CMD ")
    ]
    command = yaml.safe_load(line[len("CMD ") :])
    assert command[:2] == ["/bin/sh", "-c"]
    return str(command[2])


def pod(name: str, objects: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects or installed(), "Deployment", name)["spec"]["template"][
        "spec"
    ]
    return spec


def relocated(text: str, moves: dict[str, str]) -> str:
    """A command of the render with the pod's paths and ports moved to a test's."""
    for old, new in moves.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def api_server_command(cert_dir: Path, served: Path) -> str:
    """The API server's shell command, as the render has it."""
    command = container(pod("ml-pipeline"), "ml-pipeline-api-server")["command"][2]
    return relocated(command, {TLS_DIR: str(cert_dir), SERVED_CERTIFICATE: str(served)})


def api_server_liveness(cert_dir: Path, served: Path, port: int) -> list[str]:
    probe = container(pod("ml-pipeline"), "ml-pipeline-api-server")["livenessProbe"]
    shell, flag, command = probe["exec"]["command"]
    moves = {TLS_DIR: str(cert_dir), SERVED_CERTIFICATE: str(served), ":8888/": f":{port}/"}
    return [shell, flag, relocated(command, moves)]


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
    assert copy == f"cat {TLS_DIR}/tls.crt > {SERVED_CERTIFICATE}"
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
    # gRPC port verifies with them (the patch's comment).
    assert theirs["mountPath"] == TLS_DIR == "/etc/pki/tls/certs"


def test_the_api_servers_probes_ask_over_https() -> None:
    api = container(pod("ml-pipeline"), "ml-pipeline-api-server")
    theirs = overlay_container("ml-pipeline-apiserver-deployment.yaml")
    assert api["readinessProbe"] == theirs["readinessProbe"]
    assert api["startupProbe"] == theirs["startupProbe"]
    assert api["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    # The liveness command (run below) asks the health endpoint over TLS.
    (shell, flag, command) = api["livenessProbe"]["exec"]["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and "httpGet" not in api["livenessProbe"]
    assert f"https://localhost:{API_HTTP_PORT}{HEALTHZ_PATH}" in command


def test_runs_get_the_cluster_ca_bundle_not_the_servers_secret() -> None:
    api = container(pod("ml-pipeline"), "ml-pipeline-api-server")
    theirs = env(overlay_container("ml-pipeline-apiserver-deployment.yaml"))
    assert "CABUNDLE_SECRET_NAME" in theirs
    assert env(api)["CABUNDLE_SECRET_NAME"] == CA_BUNDLE_SECRET != kfp.API_TLS_SECRET
    # ML Metadata serves TLS: every run's driver and launcher is compiled to dial it so.
    assert theirs["METADATA_TLS_ENABLED"] == env(api)["METADATA_TLS_ENABLED"] == "true"


def test_the_api_servers_service_is_the_overlays() -> None:
    service = find(installed(), "Service", kfp.API_SERVICE)
    (theirs,) = overlay("ml-pipeline-apiserver-service.yaml")["spec"]["ports"]
    (https,) = [p for p in service["spec"]["ports"] if p["port"] == API_HTTP_PORT]
    assert https == theirs
    assert service["metadata"]["annotations"]["prometheus.io/scheme"] == "https"
    grpc = [p for p in service["spec"]["ports"] if p["port"] == API_GRPC_PORT]
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
    assert command == f"{image_command(dockerfile)} {CLIENT_TLS_FLAGS}"
    theirs = overlay_container(patch)
    words = [*theirs["command"], *theirs.get("args", [])]
    upstream_flags = {
        f
        for w in words
        for f in shlex.split(w)
        if f.startswith(("-mlPipelineServiceTLS", "-caCert"))
    }
    assert set(shlex.split(CLIENT_TLS_FLAGS)) == upstream_flags
    # The CA only, where the overlay mounts its Secret; not the server's key.
    assert mounted_secrets(spec, controller)[TLS_DIR] == {
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
    assert ours["ML_PIPELINE_SERVICE_PORT"] == str(API_HTTP_PORT)
    names = find(kfp.tls_objects(), "Certificate", kfp.API_TLS_SECRET)["spec"]["dnsNames"]
    assert ours["ML_PIPELINE_SERVICE_HOST"] in names
    assert ours["NODE_EXTRA_CA_CERTS"] == f"{TLS_DIR}/{CA_KEY}"
    assert mounted_secrets(spec, ui)[TLS_DIR]["secretName"] == CA_BUNDLE_SECRET


def test_the_api_server_certificate_holds_every_name_its_clients_use() -> None:
    certificate = find(kfp.tls_objects(), "Certificate", kfp.API_TLS_SECRET)
    names = set(certificate["spec"]["dnsNames"])
    assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    assert certificate["spec"]["secretName"] == kfp.API_TLS_SECRET
    # The overlay's names of the API server (ML Metadata's are in its own certificate).
    theirs = {
        n.replace("$(kfp-namespace)", NS)
        for n in api_cert()["spec"]["dnsNames"]
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
        kfp.MLMD_TLS_SECRET: "metadata-grpc-deployment",
        kfp.ENVOY_TLS_SECRET: "metadata-envoy-deployment",
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
    assert f"--listen=0.0.0.0:{UI_TLS_PORT}" in args
    assert f"--target=127.0.0.1:{UI_PORT}" in args  # the UI on the pod's loopback
    assert "--timed-reload=1h" in args  # cert-manager's renewals are picked up
    assert mounted_secrets(spec, proxy)[UI_PROXY_TLS_DIR]["secretName"] == kfp.UI_TLS_SECRET
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
    assert {"name": "https", "containerPort": UI_TLS_PORT, "protocol": "TCP"} in proxy["ports"]
    ui = container(spec, "ml-pipeline-ui")
    # The kubelet keeps probing the UI's own port (its health asks the API server).
    assert ui["readinessProbe"]["httpGet"]["port"] == UI_PORT
    names = find(kfp.tls_objects(), "Certificate", kfp.UI_TLS_SECRET)["spec"]["dnsNames"]
    assert set(names) == {*service_dns_names(kfp.UI_SERVICE, NS), "localhost"}


def test_the_proxy_is_the_tracking_servers_ghostunnel_release() -> None:
    assert ps.MIRRORED_IMAGES["ghostunnel"] == TRACKING_IMAGES["tracking/ghostunnel"]


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
    assert (
        set(certificates)
        == {
            kfp.API_TLS_SECRET,
            kfp.MLMD_TLS_SECRET,
            kfp.ENVOY_TLS_SECRET,
            kfp.UI_TLS_SECRET,
            CA_BUNDLE_SECRET,
        }
        | trigger
    )
    for certificate in certificates.values():
        assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    # Registered before the Deployments, which mount their Secrets.
    by_name = {(r.inputs["kind"], r.inputs["metadata"]["name"]): r for r in records}
    certificate_urns = {
        r.urn
        for r in records
        if r.inputs["kind"] == "Certificate" and r.inputs["metadata"]["name"] not in trigger
    }
    for name in (
        "ml-pipeline",
        "ml-pipeline-ui",
        "ml-pipeline-persistenceagent",
        "metadata-grpc-deployment",
        "metadata-envoy-deployment",
    ):
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
        c = spec["containers"][0]
        assert c["name"] in ("publish", "trigger")
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
    assert urlsplit(loop.TRIGGER_URL).hostname == names[0]
    ir, _ = ir_and_values()
    assert certificate in loop.trigger_objects(SPEC, AWS, ir)


def test_the_trigger_is_served_through_the_platforms_tls_proxy() -> None:
    """The trigger keeps no TLS of its own: ghostunnel (the UI's and the tracking
    server's proxy) serves its certificate on the pod's TLS port, re-reads it after a
    renewal, and forwards to the trigger, which listens on the pod's loopback only."""
    spec = trigger_pod()
    trigger, proxy = spec["containers"]
    assert (trigger["name"], proxy["name"]) == ("trigger", "tls-proxy")
    options = dict(zip(trigger["args"][2::2], trigger["args"][3::2], strict=True))
    assert (options["--bind"], options["--port"]) == ("127.0.0.1", str(TRIGGER_PORT))
    assert not {"--tls-cert", "--tls-key"} & set(options)
    assert "ports" not in trigger  # nothing of the trigger's own is on the pod's network
    assert not mounted_secrets(spec, trigger).get("/etc/ghostunnel/tls")
    assert all(v["secretName"] != loop.TRIGGER_TLS_SECRET
               for v in mounted_secrets(spec, trigger).values())  # fmt: skip
    assert proxy["image"] == AWS.image("ghostunnel")
    args = proxy["args"]
    assert args[0] == "server" and "--disable-authentication" in args
    assert f"--listen=0.0.0.0:{TRIGGER_TLS_PORT}" in args
    assert f"--target=127.0.0.1:{TRIGGER_PORT}" in args  # the trigger, on the loopback
    assert "--timed-reload=1h" in args  # cert-manager's renewals are picked up
    assert f"--cert={UI_PROXY_TLS_DIR}/tls.crt" in args
    assert f"--key={UI_PROXY_TLS_DIR}/tls.key" in args
    # Only the served pair, 0440 to the pod's group; mounted whole (no subPath), so the
    # kubelet's renewal reaches the files the proxy re-reads.
    assert mounted_secrets(spec, proxy)[UI_PROXY_TLS_DIR] == {
        "secretName": loop.TRIGGER_TLS_SECRET,
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
        "defaultMode": 0o440,
    }
    (mount,) = proxy["volumeMounts"]
    assert mount["readOnly"] is True and "subPath" not in mount
    assert spec["securityContext"]["fsGroup"] == proxy["securityContext"]["runAsGroup"]
    assert proxy["securityContext"]["readOnlyRootFilesystem"] is True
    assert proxy["ports"] == [
        {"name": "https", "containerPort": TRIGGER_TLS_PORT, "protocol": "TCP"}
    ]
    # Readiness asks the trigger's /healthz through the proxy over TLS, with more than
    # the kubelet's 1 s default (the trigger answers one connection at a time and may
    # wait on KFP); liveness only needs each one's socket to accept.
    get = proxy["readinessProbe"]["httpGet"]
    assert (get["scheme"], get["port"], get["path"]) == ("HTTPS", "https", "/healthz")
    assert proxy["readinessProbe"]["timeoutSeconds"] >= 5
    assert proxy["livenessProbe"]["tcpSocket"] == {"port": "https"}
    assert trigger["livenessProbe"]["periodSeconds"] == 20
    assert trigger["livenessProbe"]["failureThreshold"] == 3
    ir, _ = ir_and_values()
    objects = loop.trigger_objects(SPEC, AWS, ir)
    service = find(objects, "Service", loop.TRIGGER)
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "appProtocol": "https"}
    ]
    # The fence opens the proxy's TLS port only.
    fence = find(objects, "NetworkPolicy", "allow-alertmanager-to-trigger")
    (rule,) = fence["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": TRIGGER_TLS_PORT}]


def test_the_triggers_liveness_command_needs_its_loopback_port_to_accept() -> None:
    (trigger, _) = trigger_pod()["containers"]
    python, flag, code = trigger["livenessProbe"]["exec"]["command"]
    assert (python, flag) == ("python", "-c") and f", {TRIGGER_PORT})" in code

    def alive(port: int) -> bool:
        moved = code.replace(f", {TRIGGER_PORT})", f", {port})")
        done = subprocess.run([sys.executable, flag, moved], check=False, timeout=30)
        return done.returncode == 0

    with listening() as port:
        assert alive(port)
    assert not alive(port)


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
            ok = self.path == HEALTHZ_PATH
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
    # shutdown() waits for serve_forever's next poll: 0.05 s, not the default 0.5 s per test
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def started(secret: Path, served: Path) -> None:
    """What the API server's command does before ``exec``: copy the certificate."""
    copy, _, _ = api_server_command(secret, served).partition(" && exec ")
    subprocess.run(["/bin/sh", "-c", copy], check=True, timeout=10)


def alive(secret: Path, served: Path, port: int) -> bool:
    command = api_server_liveness(secret, served, port)
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


# -- ML Metadata -------------------------------------------------------------------------


def mlmd_config_descriptor() -> Any:
    """The part of ML Metadata 1.14.0's ``MetadataStoreServerConfig`` its server reads
    here (google/ml-metadata v1.14.0, ml_metadata/proto/metadata_store.proto: names,
    numbers and types as there), to parse the written config as the server does
    (``TextFormat::Parse``: an unknown field or a bad escape fails)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="mlmd_subset.proto", package="ml_metadata")
    string, boolean = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, 8
    message = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE

    def add(name: str, fields: list[tuple[str, int, int, str]]) -> None:
        m = fdp.message_type.add(name=name)
        for field, number, kind, type_name in fields:
            f = m.field.add(name=field, number=number, type=kind, label=1)  # optional
            if type_name:
                f.type_name = f".ml_metadata.{type_name}"

    add(
        "PostgreSQLDatabaseConfig",
        [
            ("host", 1, string, ""),
            ("hostaddr", 2, string, ""),
            ("port", 3, string, ""),
            ("user", 4, string, ""),
            ("password", 5, string, ""),
            ("passfile", 6, string, ""),
            ("dbname", 7, string, ""),
            ("skip_db_creation", 8, boolean, ""),
        ],
    )
    add("ConnectionConfig", [("postgresql", 5, message, "PostgreSQLDatabaseConfig")])
    add("MigrationOptions", [("enable_upgrade_migration", 3, boolean, "")])
    add(
        "SSLConfig",
        [
            ("server_key", 1, string, ""),
            ("server_cert", 2, string, ""),
            ("custom_ca", 3, string, ""),
            ("client_verify", 4, boolean, ""),
        ],
    )
    add(
        "MetadataStoreServerConfig",
        [
            ("connection_config", 1, message, "ConnectionConfig"),
            ("ssl_config", 2, message, "SSLConfig"),
            ("migration_options", 3, message, "MigrationOptions"),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("ml_metadata.MetadataStoreServerConfig")
    )


def mlmd_writer(cert_dir: Path, config_dir: Path) -> str:
    """ML Metadata's command without its final ``exec`` of the server."""
    (server,) = pod("metadata-grpc-deployment")["containers"]
    moves = {TLS_DIR: str(cert_dir), MLMD_CONFIG_DIR: str(config_dir)}
    script = relocated(server["command"][2], moves)
    writer, _, last = script.rpartition("\n")
    assert last.startswith("exec /bin/metadata_store_server ")
    return writer


def test_ml_metadata_serves_tls_from_a_config_file_as_the_overlay_does() -> None:
    spec = pod("metadata-grpc-deployment")
    (server,) = spec["containers"]
    shell, flag, script = server["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and "args" not in server
    exec_line = script.rpartition("\n")[2]
    flags = shlex.split(exec_line)[2:]
    # The overlay's container args: the server reads its config file...
    theirs = overlay_container("metadata-grpc-deployment.yaml")["args"]
    (their_file,) = [a for a in theirs if a.startswith("--metadata_store_server_config_file=")]
    config = f"{MLMD_CONFIG_DIR}/config.pbtxt"
    assert f"--metadata_store_server_config_file={config}" in flags
    assert their_file.partition("=")[0] == "--metadata_store_server_config_file"
    # ...and only it (config_file: no fallback to flags or an in-memory fake database).
    assert "--metadata_source_config_type=config_file" in flags
    assert f"--grpc_port={MLMD_PORT}" in flags and "--grpc_port=8080" in theirs
    assert not [f for f in flags if f.startswith(("--postgres_config", "--mysql_config"))]
    # The overlay's ssl_config fields, and no client certificate asked for.
    (writer,) = overlay("metadata-grpc-deployment.yaml")["spec"]["template"]["spec"][
        "initContainers"
    ]
    for field in ("ssl_config {", "server_key:", "server_cert:", "client_verify: false"):
        assert field in writer["args"][0] and field in script, field
    # The certificate where the overlay mounts it, the config in memory.
    (their_mount,) = [
        m
        for m in overlay_container("metadata-grpc-deployment.yaml")["volumeMounts"]
        if m["name"] == "tls-certs"
    ]
    assert mounted_secrets(spec, server)[their_mount["mountPath"]] == {
        "secretName": kfp.MLMD_TLS_SECRET
    }
    assert their_mount["mountPath"] == TLS_DIR
    volumes = {v["name"]: v for v in spec["volumes"]}
    (config_mount,) = [m for m in server["volumeMounts"] if m["mountPath"] == MLMD_CONFIG_DIR]
    assert volumes[config_mount["name"]]["emptyDir"]["medium"] == "Memory"
    # Probes: readiness upstream's TCP check, liveness the command run below.
    assert server["readinessProbe"]["tcpSocket"]["port"] == "grpc-api"
    shell, flag, liveness = server["livenessProbe"]["exec"]["command"]
    assert (shell, flag) == ("/bin/bash", "-c")  # run below
    assert liveness.endswith(f"exec 3<>/dev/tcp/127.0.0.1/{MLMD_PORT}")
    assert "tcpSocket" not in server["livenessProbe"]
    assert {"name": "grpc-api", "containerPort": MLMD_PORT} in server["ports"]


def test_ml_metadatas_written_config_parses_as_its_server_parses_it(tmp_path: Path) -> None:
    secret = server_secret(tmp_path / "tls", authority(), service_dns_names(kfp.MLMD_SERVICE, NS))
    config_dir = tmp_path / "mlmd"
    config_dir.mkdir()
    password = 'p"a\\ss$wo`rd$(id)'
    environment = {
        "PATH": "/usr/bin:/bin",
        "POSTGRES_PORT": "5432",
        "POSTGRES_DBNAME": ps.METADATA_DATABASE,
        "POSTGRES_USER": "kfp",
        "POSTGRES_PASSWORD": password,
    }
    subprocess.run(
        ["/bin/sh", "-c", mlmd_writer(secret, config_dir)],
        check=True,
        timeout=30,
        env=environment,
    )
    config = text_format.Parse(
        (config_dir / "config.pbtxt").read_text(), mlmd_config_descriptor()()
    )
    postgres = config.connection_config.postgresql
    assert (postgres.host, postgres.port) == (ps.PROXY_HOST, "5432")  # the PgBouncer sidecar
    assert (postgres.dbname, postgres.user, postgres.password) == (
        ps.METADATA_DATABASE,
        "kfp",
        password,
    )
    assert config.migration_options.enable_upgrade_migration  # upstream's flag
    assert config.ssl_config.server_cert == (secret / "tls.crt").read_text().rstrip("\n")
    assert config.ssl_config.server_key == (secret / "tls.key").read_text().rstrip("\n")
    assert config.HasField("ssl_config") and not config.ssl_config.client_verify
    # Readable by the server's user only; the certificate it serves kept for liveness.
    assert (config_dir / "config.pbtxt").stat().st_mode & 0o077 == 0
    assert (config_dir / "served-tls.crt").read_bytes() == (secret / "tls.crt").read_bytes()


@contextmanager
def listening() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 (the server's port, for the liveness check)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        yield sock.getsockname()[1]


def mlmd_alive(secret: Path, config_dir: Path, port: int) -> bool:
    (server,) = pod("metadata-grpc-deployment")["containers"]
    shell, flag, liveness = server["livenessProbe"]["exec"]["command"]
    moves = {TLS_DIR: str(secret), MLMD_CONFIG_DIR: str(config_dir), f"/{MLMD_PORT}": f"/{port}"}
    command = [shell, flag, relocated(liveness, moves)]
    return subprocess.run(command, check=False, capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash, as the MLMD image has")
def test_ml_metadatas_liveness_fails_after_a_renewal_or_with_its_port_closed(
    tmp_path: Path,
) -> None:
    ca = authority()
    secret = server_secret(tmp_path / "tls", ca, ["metadata-grpc-service"])
    config_dir = tmp_path / "mlmd"
    config_dir.mkdir()
    env_ = {"PATH": "/usr/bin:/bin", "POSTGRES_PASSWORD": "x"}
    subprocess.run(["/bin/sh", "-c", mlmd_writer(secret, config_dir)], check=True, env=env_)
    with listening() as port:
        assert mlmd_alive(secret, config_dir, port)
        server_secret(secret, ca, ["metadata-grpc-service"])  # cert-manager renews
        assert not mlmd_alive(secret, config_dir, port)
        subprocess.run(["/bin/sh", "-c", mlmd_writer(secret, config_dir)], check=True, env=env_)
        assert mlmd_alive(secret, config_dir, port)  # after the restart
    assert not mlmd_alive(secret, config_dir, port)  # nothing listens any more


def test_ml_metadatas_certificate_holds_the_names_its_clients_dial() -> None:
    certificate = find(kfp.tls_objects(), "Certificate", kfp.MLMD_TLS_SECRET)
    assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    names = set(certificate["spec"]["dnsNames"])
    # The overlay's names of ML Metadata (kfp-api-cert.yaml).
    theirs = {
        n.replace("$(kfp-namespace)", NS)
        for n in api_cert()["spec"]["dnsNames"]
        if n.startswith(kfp.MLMD_SERVICE)
    }
    assert theirs == names == set(service_dns_names(kfp.MLMD_SERVICE, NS))
    # The drivers' and launchers' address (backend/src/v2/metadata/env.go: the Service,
    # the pod's namespace, ``svc.cluster.local``).
    assert f"{kfp.MLMD_SERVICE}.{NS}.svc.cluster.local" in names
    # Envoy's SNI and the name it checks.
    config = yaml.safe_load(
        find(installed(), "ConfigMap", "metadata-envoy-configmap")["data"]["envoy-config.yaml"]
    )
    (cluster,) = config["static_resources"]["clusters"]
    tls = cluster["transport_socket"]["typed_config"]
    (san,) = tls["common_tls_context"]["validation_context"]["match_typed_subject_alt_names"]
    assert tls["sni"] == san["matcher"]["exact"] and san["matcher"]["exact"] in names


def test_envoy_calls_ml_metadata_over_tls_with_the_cluster_ca() -> None:
    objects = installed()
    ours = yaml.safe_load(
        find(objects, "ConfigMap", "metadata-envoy-configmap")["data"]["envoy-config.yaml"]
    )
    theirs = yaml.safe_load(overlay("metadata-envoy-configmap.yaml")["data"]["envoy-config.yaml"])
    (our_cluster,) = ours["static_resources"]["clusters"]
    (their_cluster,) = theirs["static_resources"]["clusters"]
    assert our_cluster["load_assignment"] == their_cluster["load_assignment"]
    our_tls, their_tls = (c["transport_socket"] for c in (our_cluster, their_cluster))
    assert our_tls["name"] == their_tls["name"] == "envoy.transport_sockets.tls"
    ours_typed, theirs_typed = our_tls["typed_config"], their_tls["typed_config"]
    assert ours_typed["@type"] == theirs_typed["@type"]
    assert ours_typed["sni"] == theirs_typed["sni"] == f"{kfp.MLMD_SERVICE}.{NS}.svc"
    validation = ours_typed["common_tls_context"]["validation_context"]
    assert validation["trusted_ca"] == {"filename": f"{TLS_DIR}/{CA_KEY}"}
    # The CA only, mounted where the config reads it; never a server key.
    spec = pod("metadata-envoy-deployment", objects)
    (envoy,) = spec["containers"]
    assert mounted_secrets(spec, envoy)[TLS_DIR] == {
        "secretName": CA_BUNDLE_SECRET,
        "items": [{"key": CA_KEY, "path": CA_KEY}],
    }


def test_envoy_serves_the_ui_over_tls_as_the_overlay_does() -> None:
    objects = installed()
    ours = yaml.safe_load(
        find(objects, "ConfigMap", "metadata-envoy-configmap")["data"]["envoy-config.yaml"]
    )
    theirs = yaml.safe_load(overlay("metadata-envoy-configmap.yaml")["data"]["envoy-config.yaml"])
    (our_listener,) = ours["static_resources"]["listeners"]
    (their_listener,) = theirs["static_resources"]["listeners"]
    assert our_listener["address"] == their_listener["address"]
    (our_chain,) = our_listener["filter_chains"]
    (their_chain,) = their_listener["filter_chains"]
    our_tls = our_chain["transport_socket"]["typed_config"]
    their_tls = their_chain["transport_socket"]["typed_config"]
    # The overlay's, but for where the certificate is mounted.
    (pair,) = our_tls["common_tls_context"]["tls_certificates"]
    assert pair == {
        "certificate_chain": {"filename": f"{ENVOY_TLS_DIR}/tls.crt"},
        "private_key": {"filename": f"{ENVOY_TLS_DIR}/tls.key"},
    }
    for tls in (our_tls, their_tls):
        tls["common_tls_context"].pop("tls_certificates")
    assert our_tls == their_tls
    assert our_chain["filters"] == their_chain["filters"]
    # Its own certificate, mounted read-only; restarted after a renewal; probed.
    spec = pod("metadata-envoy-deployment", objects)
    (envoy,) = spec["containers"]
    assert mounted_secrets(spec, envoy)[ENVOY_TLS_DIR] == {"secretName": kfp.ENVOY_TLS_SECRET}
    assert envoy["command"][:2] == ["/bin/sh", "-c"] and "args" not in envoy
    assert envoy["command"][2].startswith(f"cat {ENVOY_TLS_DIR}/tls.crt > {SERVED_CERTIFICATE}")
    assert envoy["command"][2].endswith(
        "exec /usr/local/bin/envoy -c "
        + overlay_container("metadata-envoy-deployment.yaml")["args"][0]
    )
    assert envoy["livenessProbe"]["exec"]["command"][:2] == ["/bin/bash", "-c"]  # run below
    assert envoy["readinessProbe"]["tcpSocket"]["port"] == ENVOY_PORT
    names = find(kfp.tls_objects(), "Certificate", kfp.ENVOY_TLS_SECRET)["spec"]["dnsNames"]
    assert set(names) == set(service_dns_names(kfp.ENVOY_SERVICE, NS))
    # The Service as the overlay patches it.
    (port,) = find(objects, "Service", kfp.ENVOY_SERVICE)["spec"]["ports"]
    assert port == overlay("metadata-envoy-service.yaml")["spec"]["ports"][0]


def test_the_ui_calls_envoy_over_https_by_a_name_of_its_certificate() -> None:
    ui = container(pod("ml-pipeline-ui"), "ml-pipeline-ui")
    ours, theirs = env(ui), env(overlay_container("ml-pipeline-ui-deployment.yaml"))
    for name in (
        "METADATA_ENVOY_SERVICE_SERVICE_HOST",
        "METADATA_ENVOY_SERVICE_SERVICE_PORT",
        "METADATA_ENVOY_SERVICE_SERVICE_SCHEME",
    ):
        assert ours[name] == theirs[name], name
    assert ours["METADATA_ENVOY_SERVICE_SERVICE_SCHEME"] == "https"
    names = find(kfp.tls_objects(), "Certificate", kfp.ENVOY_TLS_SECRET)["spec"]["dnsNames"]
    assert ours["METADATA_ENVOY_SERVICE_SERVICE_HOST"] in names
    assert ours["METADATA_ENVOY_SERVICE_SERVICE_PORT"] == str(ENVOY_PORT)


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash, as the Envoy image has")
def test_envoys_liveness_fails_after_a_renewal_or_with_its_port_closed(tmp_path: Path) -> None:
    ca = authority()
    secret = server_secret(tmp_path / "tls", ca, ["metadata-envoy-service"])
    served = tmp_path / "served-tls.crt"
    (envoy,) = pod("metadata-envoy-deployment")["containers"]
    moves = {ENVOY_TLS_DIR: str(secret), SERVED_CERTIFICATE: str(served)}
    copy = relocated(envoy["command"][2], moves).partition(" && exec ")[0]
    subprocess.run(["/bin/sh", "-c", copy], check=True, timeout=10)

    def alive(port: int) -> bool:
        shell, flag, liveness = envoy["livenessProbe"]["exec"]["command"]
        command = [shell, flag, relocated(liveness, {**moves, f"/{ENVOY_PORT}": f"/{port}"})]
        return subprocess.run(command, check=False, capture_output=True, timeout=30).returncode == 0

    with listening() as port:
        assert alive(port)
        server_secret(secret, ca, ["metadata-envoy-service"])  # cert-manager renews
        assert not alive(port)
        subprocess.run(["/bin/sh", "-c", copy], check=True, timeout=10)  # the restart
        assert alive(port)
    assert not alive(port)
