"""``make serve-llm``: vLLM's OpenAI-compatible server for one local model folder.

Every input is checked before vLLM's half-minute start, each failure one line and a
non-zero exit: the model folder (a local directory in Hugging Face format: weights only
from local or in-region storage, never a hub id), its ``config.json``, a head size that
vLLM's CPU attention supports, the context length, a tokenizer, the chat template, the
KV-cache size and the port. Then vLLM runs as a child process on 127.0.0.1 with:

- ``--dtype float32`` (the CPU build's reference precision);
- ``--max-model-len`` from the model's ``config.json`` (vLLM refuses a longer one);
- ``--kv-cache-memory-bytes``: a bounded KV cache (vLLM's CPU build otherwise asks for
  92 % of the machine's memory);
- the model's own chat template, or the one shipped beside this module;
- ``HF_HUB_OFFLINE=1`` and no usage statistics sent anywhere;
- ``VLLM_API_KEY`` passed through from the caller's environment when set (vLLM then
  requires it as a bearer token; never on the command line, where ``ps`` shows it).

Ctrl-C (or SIGTERM) stops vLLM and its workers and says so in one line.

Usage::

    python -m workloads.llm.serve <model dir> [--port 8080] [--name NAME] [--kv-cache-gib 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

HOST = "127.0.0.1"  # never a public interface: the cluster's gateway is the way in
HERE = Path(__file__).resolve().parent
#: The chat template served when the model carries none (a plain role-prefixed transcript;
#: a byte-level model has no special tokens to mark turns with).
CHAT_TEMPLATE = HERE / "chat_template.jinja"
#: How long vLLM may take to answer /health (it takes 22-60 s here).
STARTUP_S = 300.0
#: How long vLLM has to stop after Ctrl-C before its process group is killed.
STOP_S = 30.0
#: What is never a local model: a hub id, a hub URL (weights only from local or in-region
#: storage; a registry model is `models:/name@alias`, which the Makefile resolves first).
HUB = re.compile(r"^(hf://|https?://|[^/\s]*huggingface\.co)", re.IGNORECASE)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: Environment of the server: no hub downloads, no usage report leaves the machine.
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    # Its log reaches the terminal through this process's pipe: line by line, not in
    # blocks that arrive minutes late.
    "PYTHONUNBUFFERED": "1",
}


HEAD_SIZES = (
    "import json; from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend as B; "
    "print(json.dumps(B.get_supported_head_sizes()))"
)


class UsageError(Exception):
    """A user error: its message is the one line printed."""


@dataclass(frozen=True)
class ModelFolder:
    """A local model folder, checked.

    Args:
        path: the folder.
        head_size: attention head size (hidden size / heads, or ``head_dim``).
        context: the model's ``max_position_embeddings`` (``n_positions`` for GPT-2).
        chat_template: the template file to pass, or None where the model has its own.
    """

    path: Path
    head_size: int
    context: int
    chat_template: Path | None


def _config_int(config: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def head_size(config: Mapping[str, Any]) -> int:
    """The attention head size a Hugging Face ``config.json`` describes."""
    explicit = _config_int(config, "head_dim")
    if explicit is not None:
        return explicit
    hidden = _config_int(config, "hidden_size", "n_embd", "d_model")
    heads = _config_int(config, "num_attention_heads", "n_head")
    if hidden is None or heads is None:
        raise UsageError("config.json names no hidden size and head count (not a decoder model?)")
    return hidden // heads


def context_length(config: Mapping[str, Any]) -> int:
    """The longest sequence the model takes: vLLM's --max-model-len may not exceed it."""
    length = _config_int(config, "max_position_embeddings", "n_positions", "n_ctx")
    if length is None:
        raise UsageError("config.json names no max_position_embeddings (or n_positions)")
    return length


def supported_head_sizes(python: str = sys.executable) -> list[int]:
    """The head sizes the installed vLLM's CPU attention runs (it accepts any model at
    start and then fails every request with another head size).

    Asked of a child Python: importing vLLM prints warnings of its own (about Triton)
    that would follow a refused model's one line."""
    result = subprocess.run(
        [python, "-c", HEAD_SIZES],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
    )
    try:
        sizes = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as err:
        raise UsageError(
            "cannot read vLLM's supported head sizes (is the llm environment complete? "
            "make serve-llm installs it)"
        ) from err
    return [int(size) for size in sizes]


def has_chat_template(folder: Path) -> bool:
    """Whether the tokenizer carries a chat template (transformers 5 writes it as
    ``chat_template.jinja``, earlier releases into ``tokenizer_config.json``)."""
    if (folder / "chat_template.jinja").is_file():
        return True
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return False
    try:
        return bool(json.loads(config.read_text()).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return False


def model_folder(spec: str) -> ModelFolder:
    """Check that ``spec`` is a local model folder in Hugging Face format (the head size
    is checked by `check_head_size`, which asks vLLM: after the cheaper checks).

    Args:
        spec: the MODEL the user gave.
    """
    if HUB.match(spec):
        raise UsageError(
            f"MODEL={spec} is a hub address: weights come only from a local folder or the "
            "in-region registry (MODEL=models:/<name>@<alias>)"
        )
    path = Path(spec)
    if not path.exists():
        hint = (
            " (a hub id? weights come only from a local folder or models:/<name>@<alias>)"
            if HUB_ID.match(spec)
            else ""
        )
        raise UsageError(f"MODEL={spec}: no such directory{hint}")
    if not path.is_dir():
        raise UsageError(f"MODEL={spec} is a file: give the model's folder (with config.json)")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise UsageError(
            f"MODEL={spec} has no config.json: give a Hugging Face model folder (make export-hf)"
        )
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{config_file} is not readable JSON ({err})") from err
    if not isinstance(config, dict):
        raise UsageError(f"{config_file} is not a JSON object")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise UsageError(f"MODEL={spec} has no tokenizer (tokenizer.json): export it with one")
    return ModelFolder(
        path=path.resolve(),
        head_size=head_size(config),
        context=context_length(config),
        chat_template=None if has_chat_template(path) else CHAT_TEMPLATE,
    )


def from_registry(uri: str, tracking_uri: str, python: Path, out: Path) -> Path:
    """The local folder of the registry's model version ``uri`` (``models:/<name>@<alias>``),
    downloaded by `workloads.llm.registry` in the lifecycle environment (``python``: the
    llm environment has no MLflow)."""
    if not python.exists():
        raise UsageError(f"MODEL={uri} needs the lifecycle environment ({python}): make setup")
    result = subprocess.run(
        [str(python), "-m", "workloads.llm.registry", uri, "--tracking-uri", tracking_uri,
         "--out", str(out)],
        cwd=HERE.parents[1], capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exited {result.returncode}"]
        raise UsageError(lines[-1].removeprefix("serve-llm: "))
    return Path(result.stdout.strip().splitlines()[-1])


def check_head_size(model: ModelFolder, sizes: Sequence[int]) -> None:
    """Refuse a model whose head size is not in ``sizes`` (`supported_head_sizes`)."""
    if model.head_size not in sizes:
        raise UsageError(
            f"MODEL={model.path} has attention head size {model.head_size}, which vLLM's CPU "
            f"attention does not run (it runs {', '.join(map(str, sizes))}): train with "
            "n_embd/n_head in that list"
        )


def check_port(port: int) -> None:
    """Refuse a port outside 1024-65535 or one something on 127.0.0.1 already holds."""
    if not 1024 <= port <= 65535:
        raise UsageError(f"PORT={port}: give a port in 1024-65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError as err:
            raise UsageError(
                f"PORT={port} on {HOST} is in use ({err.strerror}): stop what holds it or "
                "choose another PORT="
            ) from err


def kv_cache_bytes(gib: float) -> int:
    """The KV cache's size in bytes: positive and below the memory the machine has."""
    if not gib > 0:
        raise UsageError(f"KV_CACHE_GIB={gib}: give a positive size in GiB (e.g. 1)")
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    wanted = int(gib * 2**30)
    if wanted >= total // 2:
        raise UsageError(
            f"KV_CACHE_GIB={gib} is half or more of this machine's {total / 2**30:.1f} GiB: "
            "give less"
        )
    return wanted


def server_command(
    model: ModelFolder,
    *,
    name: str,
    port: int,
    max_model_len: int,
    kv_bytes: int,
    python: str = sys.executable,
) -> list[str]:
    """The vLLM command line (``python -m vllm.entrypoints.openai.api_server ...``)."""
    command = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model.path),
        "--served-model-name",
        name,
        "--host",
        HOST,
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_model_len),
        "--kv-cache-memory-bytes",
        str(kv_bytes),
        # Logs a line per request otherwise: the access log is the gateway's job.
        "--disable-uvicorn-access-log",
    ]
    if model.chat_template is not None:
        command += ["--chat-template", str(model.chat_template)]
    return command


def server_environment(base: Mapping[str, str]) -> dict[str, str]:
    """The environment vLLM runs in: the caller's (``VLLM_API_KEY`` among it) with
    `SERVER_ENV`."""
    return {**base, **SERVER_ENV}


def _forward(stream: IO[bytes], quiet: threading.Event) -> None:
    """Copy vLLM's output to ours until it closes, dropping it once stopping began (its
    shutdown prints pages of warnings; the one line is ours)."""
    for line in iter(stream.readline, b""):
        if not quiet.is_set():
            sys.stderr.buffer.write(line)
            sys.stderr.flush()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGINT to vLLM's process group (it stops its engine and workers), then SIGKILL to
    whatever is left after `STOP_S`."""
    if child.poll() is not None:
        return
    os.killpg(child.pid, signal.SIGINT)
    try:
        child.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def run(command: list[str], env: Mapping[str, str], port: int, url: str) -> int:
    """Run vLLM until it exits or we are told to stop; its exit status (130 after Ctrl-C)."""
    stopping = threading.Event()
    signals: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signum)
        stopping.set()

    # Before the child exists, so no Ctrl-C falls between the two (the child starts with
    # the default handlers: exec resets them).
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    # Its own session: a terminal's Ctrl-C reaches this process only, which then stops
    # vLLM's whole group in order (engine core and workers are its children).
    child = subprocess.Popen(
        command,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert child.stdout is not None
    forwarder = threading.Thread(target=_forward, args=(child.stdout, stopping), daemon=True)
    forwarder.start()
    try:
        deadline = time.monotonic() + STARTUP_S
        ready = False
        while not stopping.is_set() and child.poll() is None:
            if not ready and _healthy(port):
                ready = True
                print(f"serve-llm: ready on {url}; Ctrl-C stops it", file=sys.stderr, flush=True)
            if not ready and time.monotonic() > deadline:
                stopping.set()
                _stop(child)
                print(
                    f"serve-llm: vLLM did not answer /health within {STARTUP_S:.0f} s; stopped",
                    file=sys.stderr,
                )
                return 1
            stopping.wait(0.5)
        if stopping.is_set():
            _stop(child)
            print("serve-llm: stopped", file=sys.stderr)
            return 130 if signal.SIGINT in signals else 143
        forwarder.join(timeout=5)
        code = child.returncode
        print(
            f"serve-llm: vLLM exited {code}{'' if ready else ' before it was ready'} "
            "(its log above)",
            file=sys.stderr,
        )
        return code if code != 0 else 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.llm.serve",
        description="vLLM's OpenAI-compatible server (CPU build) for a local model folder.",
    )
    parser.add_argument("model", help="a local Hugging Face model folder (config.json, weights)")
    parser.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (8080)")
    parser.add_argument("--name", help="the model's name in the API (default: the folder's name)")
    parser.add_argument(
        "--max-model-len", type=int, help="context length (default: the model's, at most that)"
    )
    parser.add_argument("--kv-cache-gib", type=float, default=1.0, help="KV-cache size (1 GiB)")
    parser.add_argument(
        "--tracking-uri", default="http://127.0.0.1:5000", help="the registry (models:/ only)"
    )
    parser.add_argument(
        "--registry-python",
        type=Path,
        default=HERE.parents[1] / ".venv-lifecycle/bin/python",
        help="the lifecycle environment's Python, which downloads a models:/ version",
    )
    parser.add_argument(
        "--registry-out", type=Path, default=Path("build/llm-models"), help="where it goes"
    )
    parser.add_argument(
        "--check", action="store_true", help="check the inputs, print the command, start nothing"
    )
    args = parser.parse_args(argv)
    name = args.name
    try:
        spec = args.model
        if spec.startswith("models:/"):
            folder = from_registry(spec, args.tracking_uri, args.registry_python, args.registry_out)
            spec = str(folder)
            # <out>/<name>/<version>: served under the registered model's name.
            name = name or folder.parent.name
        model = model_folder(spec)
        length = model.context if args.max_model_len is None else args.max_model_len
        if not 1 <= length <= model.context:
            raise UsageError(
                f"MAX_MODEL_LEN={length}: give 1-{model.context} (the model's "
                "max_position_embeddings)"
            )
        kv_bytes = kv_cache_bytes(args.kv_cache_gib)
        check_port(args.port)
        check_head_size(model, supported_head_sizes())
    except UsageError as err:
        print(f"serve-llm: {err}", file=sys.stderr)
        return 2
    name = name or model.path.name
    command = server_command(
        model, name=name, port=args.port, max_model_len=length, kv_bytes=kv_bytes
    )
    env = server_environment(os.environ)
    url = f"http://{HOST}:{args.port}/v1"
    if args.check:
        print(" ".join(command))
        return 0
    key = "API key required (VLLM_API_KEY)" if env.get("VLLM_API_KEY") else "no API key"
    template = "the model's" if model.chat_template is None else str(model.chat_template)
    print(
        f"serve-llm: {name} from {model.path} at {url} (context {length}, KV cache "
        f"{kv_bytes / 2**30:g} GiB, chat template {template}, {key}); starting vLLM",
        file=sys.stderr,
        flush=True,
    )
    return run(command, env, args.port, url)


if __name__ == "__main__":
    sys.exit(main())
