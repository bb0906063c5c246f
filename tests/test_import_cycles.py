"""No import cycle among the project's modules, counting every import the code names.

The graph is read from the source with `ast`, not from the interpreter: imports under
``if TYPE_CHECKING:`` and imports inside functions count as edges, because a reader has
to follow them as much as the interpreter does. ``from x import y`` is an edge to the
module ``x.y`` where that is a module of the project, else to ``x``; importing
``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``, so it is an edge to each
package above the target that does not already contain the importer.

The Kubernetes layer (``modules/k8s``) is also held to its layers: the shared flat
modules import no service package; a service's pure modules (``spec.py`` and its other
non-component modules) import neither a component nor the platform package (the
aggregate ``modules.k8s.platform.spec`` and above); the aggregate imports no component;
no service component imports another (only ``platform.component`` composes them).

The Pulumi rooms and the images' code meet in two named places only: the Pulumi side
reads the trainer's torch-free settings (`PULUMI_READS_FROM_WORKLOADS`: its config and
presets, fabric settings, metrics port, and the artifact layout), and the workload
stages read the shared checker (`WORKLOADS_READ_FROM_MODULES`: ``modules.validation``).
Both sides of each are standard library only (`test_what_the_rooms_share_is_standard_library_only`).
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The rooms of the project whose modules import each other (tests included: they are
#: modules too, and ``tests.conftest`` is imported by name).
ROOMS = ("modules", "stacks", "workloads", "policies", "tools", "tests")
K8S = "modules.k8s"
AGGREGATE = f"{K8S}.platform.spec"


@dataclass(frozen=True)
class Edge:
    """One import: ``source`` names ``target`` at ``line`` of ``path``."""

    source: str
    target: str
    path: str
    line: int


def module_name(path: Path, root: Path) -> str:
    """``modules/k8s/gpu/spec.py`` -> ``modules.k8s.gpu.spec``; a package's
    ``__init__.py`` is the package itself."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, rooms: Iterable[str]) -> dict[str, Path]:
    """Every module of the given rooms, by dotted name."""
    found: dict[str, Path] = {}
    for room in rooms:
        for path in sorted((root / room).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(
    tree: ast.AST, importer: str, is_package: bool, modules: Mapping[str, Path]
) -> list[tuple[str, int]]:
    """(project module, line) of every import anywhere in ``tree``: ``ast.walk`` reaches
    ``if TYPE_CHECKING:`` blocks and function bodies alike. ``import a.b`` names the
    longest of ``a.b``, ``a`` that is a project module; ``from x import y`` names the
    module ``x.y`` where there is one, else ``x`` (for a name defined in it)."""
    named: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                prefixes = [*_ancestors(alias.name), alias.name]
                found = [p for p in prefixes if p in modules]
                if found:
                    named.append((found[-1], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, importer, is_package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    named.append((full, node.lineno))
                elif base in modules:
                    named.append((base, node.lineno))
    return named


def import_graph(modules: Mapping[str, Path], root: Path) -> dict[str, list[Edge]]:
    """Module -> its imports of other project modules (with where each is written)."""
    graph: dict[str, list[Edge]] = {name: [] for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        own = set(_ancestors(name))
        relative = str(path.relative_to(root))
        for target, line in imports_of(tree, name, path.name == "__init__.py", modules):
            # Importing a.b.c runs the packages above it first, except those the
            # importer is inside (they are running already).
            implied = [a for a in _ancestors(target) if a in modules and a not in own]
            for reached in [target, *implied]:
                edge = Edge(name, reached, relative, line)
                if reached != name and edge not in graph[name]:
                    graph[name].append(edge)
    return graph


def find_cycles(graph: Mapping[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component with more than one
    module (Tarjan's algorithm, iterative); `describe` names the whole component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            edges = graph[node]
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i].target
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: list[str], graph: Mapping[str, list[Edge]]) -> list[Edge]:
    """A shortest cycle through the component's first module (breadth-first)."""
    members = set(component)
    start = component[0]
    came_from: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in graph[node]:
                if edge.target not in members:
                    continue
                if edge.target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came_from[path[0].source])
                    return path
                if edge.target not in came_from:
                    came_from[edge.target] = edge
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {component}")  # pragma: no cover


def describe(cycle: list[Edge], graph: Mapping[str, list[Edge]] | None = None) -> str:
    """``a -> b -> a`` with where each import is written, and (given the graph) every
    module caught in the same circle."""
    head = " -> ".join([*(e.source for e in cycle), cycle[0].source])
    steps = [f"  {e.source} -> {e.target}  ({e.path}:{e.line})" for e in cycle]
    if graph is not None:
        members = _component_of(cycle[0].source, graph)
        if len(members) > len(cycle):
            steps.append(f"  ({len(members)} modules in this circle: {', '.join(members)})")
    return "\n".join([head, *steps])


def _reach(start: str, graph: Mapping[str, list[Edge]], reverse: bool = False) -> set[str]:
    edges: dict[str, set[str]] = {}
    for source, out in graph.items():
        for e in out:
            a, b = (e.target, source) if reverse else (source, e.target)
            edges.setdefault(a, set()).add(b)
    seen, todo = {start}, [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _component_of(module: str, graph: Mapping[str, list[Edge]]) -> list[str]:
    return sorted(_reach(module, graph) & _reach(module, graph, reverse=True))


@functools.cache
def project_graph() -> dict[str, list[Edge]]:
    """The project's import graph, parsed once per session (four tests read it; none
    changes it)."""
    return import_graph(project_modules(ROOT, ROOMS), ROOT)


def test_no_import_cycle_among_the_project_modules() -> None:
    graph = project_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(describe(c, graph) for c in cycles)


def _is_component(module: str) -> bool:
    return module.rsplit(".", 1)[-1] == "component"


def _service(module: str, packages: set[str]) -> str | None:
    """The package of modules/k8s a module belongs to (``gpu``, ``platform``...), or
    None for the shared flat modules (``common``, ``names``, ``objects``, ``versions``)."""
    parts = module.split(".")
    if not module.startswith(f"{K8S}.") or (len(parts) == 3 and module not in packages):
        return None
    return parts[2]


def layer_violations(graph: Mapping[str, list[Edge]]) -> list[str]:
    """Imports that break the layering of modules/k8s:

    shared flat modules -> service specs (and their other pure modules) -> the aggregate
    ``platform.spec`` -> service components -> the composition ``platform.component``.
    """
    packages = {a for name in graph for a in _ancestors(name)}
    wrong = []
    for source, edges in graph.items():
        if not source.startswith(f"{K8S}."):
            continue
        service = _service(source, packages)
        for e in edges:
            target_service = _service(e.target, packages)
            if service is None and target_service is not None:
                rule = "a shared module imports a service package"
            elif (
                service not in (None, "platform")
                and not _is_component(source)
                and (_is_component(e.target) or target_service == "platform")
            ):
                rule = "a pure module imports a component or the platform package"
            elif source == AGGREGATE and (_is_component(e.target) or target_service == "platform"):
                rule = "the aggregate imports a component or the composition"
            elif service != "platform" and _is_component(source) and _is_component(e.target):
                rule = "a component imports another component (only the platform composes)"
            else:
                continue
            wrong.append(f"{rule}: {e.source} -> {e.target} ({e.path}:{e.line})")
    return wrong


def test_k8s_layers_pure_modules_stay_below_the_aggregate_and_the_components() -> None:
    graph = project_graph()
    assert AGGREGATE in graph, "the aggregate KubernetesPlatformArgs moved: update AGGREGATE"
    assert not (wrong := layer_violations(graph)), "\n".join(wrong)


#: What each room (and each workload stage) may import besides itself, as ARCHITECTURE.md
#: states it. Workload stages import only the stages before them: data -> training ->
#: inference -> tracking / serving; the aliases at the workloads root run the trainer.
#: The pipeline imports no stage: each step runs its stage's module in that stage's own
#: image or environment (`python -m workloads.<stage>...`), named in
#: workloads.pipelines.steps. Between the Pulumi rooms and the workloads, only the
#: modules named below (`PULUMI_READS_FROM_WORKLOADS`, `WORKLOADS_READ_FROM_MODULES`).
ALLOWED_IMPORTS: dict[str, set[str]] = {
    "modules": set(),
    "stacks": {"modules"},
    "policies": {"modules", "stacks"},
    "tools": set(),
    "workloads.data": set(),
    "workloads.training": {"workloads.data"},
    "workloads.inference": {"workloads.data", "workloads.training"},
    "workloads.tracking": {
        "workloads.data",
        "workloads.training",
        "workloads.inference",
    },
    "workloads.serving": {"workloads.inference"},
    "workloads.horovod": set(),
    "workloads.pipelines": set(),
    # vLLM's server and bench; its registry step (lifecycle environment) uses the
    # registry commands' MLflow client.
    "workloads.llm": {"workloads.tracking"},
    # LoRA fine-tuning reads `make data`'s shards and manifest (their torch-free readers).
    "workloads.finetune": {"workloads.data"},
    "workloads.aliases": {"workloads.training"},
    # Where an export's and a registered version's files are: one pure module that the
    # export, the registry commands and the InferenceService spec share.
    "workloads.layout": set(),
    # One writer per output directory: the lock beside OUT and the swap into place,
    # shared by the data job and the export (standard library only).
    "workloads.output_lock": set(),
    # The tabular example: its own features, model and export, served by the V2 server.
    "workloads.features": {
        "workloads.inference",
        "workloads.serving",
        "workloads.training",
    },
}
#: Modules of the workloads root that any stage may import.
SHARED_WORKLOAD_MODULES = {"workloads.layout", "workloads.output_lock"}
#: What the Pulumi rooms (`modules/`, `stacks/`) may import of the workloads: the
#: trainer's settings that a TrainingJob is made of (config and presets, fabric
#: settings, the metrics port) and where an export's files are. Torch-free: standard
#: library and `WORKLOADS_READ_FROM_MODULES` only, so the plan never imports torch.
PULUMI_READS_FROM_WORKLOADS = {
    "workloads.training",
    "workloads.training.config",
    "workloads.training.fabric",
    "workloads.training.metrics_endpoint",
    "workloads.layout",
}
#: What a workload stage (the code in images) may import of the Pulumi rooms: the
#: all-errors-at-once checker, standard library only (tests/test_image_imports.py
#: checks that each image copies exactly this much of `modules/`).
WORKLOADS_READ_FROM_MODULES = {"modules", "modules.validation"}


def room_of(module: str) -> str | None:
    """The room of ALLOWED_IMPORTS a module belongs to (None: tests, or not a room)."""
    parts = module.split(".")
    if parts[0] == "workloads":
        if len(parts) == 1:
            return None
        stage = f"workloads.{parts[1]}"
        if stage in ALLOWED_IMPORTS:
            return stage
        return "workloads.aliases"
    return parts[0] if parts[0] in ALLOWED_IMPORTS else None


def room_violations(graph: Mapping[str, list[Edge]]) -> list[str]:
    wrong = []
    for source, edges in graph.items():
        room = room_of(source)
        if room is None:
            continue
        for e in edges:
            target = room_of(e.target)
            if e.target == "workloads" or target in (None, room):
                continue
            if target in SHARED_WORKLOAD_MODULES and room.startswith("workloads"):
                continue
            if room in ("modules", "stacks") and e.target in PULUMI_READS_FROM_WORKLOADS:
                continue
            if room.startswith("workloads") and e.target in WORKLOADS_READ_FROM_MODULES:
                continue
            allowed = ALLOWED_IMPORTS[room]
            if target not in allowed and target.split(".")[0] not in allowed:
                wrong.append(
                    f"{room} may not import {target}: {e.source} -> {e.target} ({e.path}:{e.line})"
                )
    return wrong


def test_rooms_and_workload_stages_import_only_what_they_may() -> None:
    assert not (wrong := room_violations(project_graph())), "\n".join(wrong)


def test_what_the_rooms_share_is_standard_library_only() -> None:
    """The modules the Pulumi rooms read of the workloads, and those the workloads read
    of the Pulumi rooms, import (all the way down) only each other and the standard
    library: no torch in the plan, no Pulumi in an image."""
    shared = PULUMI_READS_FROM_WORKLOADS | WORKLOADS_READ_FROM_MODULES
    graph = project_graph()
    modules = project_modules(ROOT, ROOMS)
    wrong = [f"{e.source} -> {e.target} ({e.path}:{e.line})" for m in shared
             for e in graph[m] if e.target not in shared | {"workloads"}]  # fmt: skip
    for name in sorted(shared):
        tree = ast.parse(modules[name].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            wrong += [f"{name} imports {top} (line {node.lineno})" for top in tops
                      if top not in sys.stdlib_module_names and top not in ROOMS]  # fmt: skip
    assert not wrong, "\n".join(wrong)


def test_the_rooms_meet_only_in_the_shared_modules(tmp_path: Path) -> None:
    graph = _write(
        tmp_path,
        {
            "modules/__init__.py": "",
            "modules/validation.py": "",
            "modules/k8s/__init__.py": "from workloads.training import config\n",
            "modules/k8s/names.py": "from workloads.training import model\n",
            "workloads/__init__.py": "",
            "workloads/training/__init__.py": "",
            "workloads/training/config.py": "from modules import validation\n",
            "workloads/training/model.py": "",
            "workloads/serving/__init__.py": "from modules.k8s import names\n",
        },
        rooms=("modules", "workloads"),
    )
    assert sorted(w.split(" (")[0] for w in room_violations(graph)) == [
        "modules may not import workloads.training: modules.k8s.names -> workloads.training.model",
        "workloads.serving may not import modules: workloads.serving -> modules.k8s",
        "workloads.serving may not import modules: workloads.serving -> modules.k8s.names",
    ]


def test_a_stage_importing_a_later_stage_is_refused(tmp_path: Path) -> None:
    graph = _write(
        tmp_path,
        {
            "workloads/__init__.py": "",
            "workloads/training/__init__.py": "",
            "workloads/training/train.py": "from workloads.serving import app\n",
            "workloads/serving/__init__.py": "",
            "workloads/serving/app.py": "from workloads.inference import runtime\n",
            "workloads/inference/__init__.py": "",
            "workloads/inference/runtime.py": "",
        },
        rooms=("workloads",),
    )
    wrong = room_violations(graph)
    # The edge to the module and the one to its package: both from training to serving;
    # serving -> inference is allowed.
    assert wrong and all(
        w.startswith("workloads.training may not import workloads.serving") for w in wrong
    )


# -- the walker itself: it must see every kind of import it claims to count --


def _write(
    root: Path, files: Mapping[str, str], rooms: Iterable[str] = ("pkg",)
) -> dict[str, list[Edge]]:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(project_modules(root, rooms), root)


def _targets(graph: Mapping[str, list[Edge]], module: str) -> set[str]:
    return {e.target for e in graph[module]}


@pytest.mark.parametrize(
    ("importer", "label"),
    [
        (
            "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.b import B\n",
            "TYPE_CHECKING",
        ),
        ("def f() -> None:\n    from pkg import b  # noqa\n", "function-level from-import"),
        ("def f() -> None:\n    import pkg.b\n", "function-level import"),
        ("from . import b\n", "relative import"),
        ("from .b import B\n", "relative from-import"),
    ],
)
def test_the_walker_finds_a_cycle_through_every_kind_of_import(
    tmp_path: Path, importer: str, label: str
) -> None:
    graph = _write(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/a.py": importer, "pkg/b.py": "from pkg.a import A\n"},
    )
    cycles = find_cycles(graph)
    assert len(cycles) == 1, label
    assert {e.source for e in cycles[0]} == {"pkg.a", "pkg.b"}, label
    assert describe(cycles[0]).startswith("pkg.a -> pkg.b -> pkg.a\n"), label


def test_from_x_import_y_is_an_edge_to_the_module_x_y(tmp_path: Path) -> None:
    graph = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/mod.py": "VALUE = 1\n",
            "pkg/user.py": "from pkg.sub import mod\nfrom pkg.sub.mod import VALUE\n",
        },
    )
    assert _targets(graph, "pkg.user") == {"pkg.sub", "pkg.sub.mod"}


def test_a_package_init_that_imports_its_importer_back_is_a_cycle(tmp_path: Path) -> None:
    # pkg.low's import of pkg.high.spec runs pkg/high/__init__.py, which imports pkg.low.
    graph = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/high/__init__.py": "from pkg.high.component import C\n",
            "pkg/high/spec.py": "S = 1\n",
            "pkg/high/component.py": "from pkg.low import L\nC = L\n",
            "pkg/low.py": "from pkg.high.spec import S\nL = S\n",
        },
    )
    (cycle,) = find_cycles(graph)
    assert {e.source for e in cycle} == {"pkg.high", "pkg.high.component", "pkg.low"}


def test_an_acyclic_tree_has_no_cycle(tmp_path: Path) -> None:
    graph = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/svc/__init__.py": '"""A service."""\n',
            "pkg/svc/spec.py": "from pkg import shared\n",
            "pkg/svc/component.py": "from pkg.svc.spec import S\nfrom pkg.svc import spec\n",
            "pkg/shared.py": "import json\n",
        },
    )
    assert find_cycles(graph) == []
    # A submodule does not depend on the package that contains it (it runs first).
    assert _targets(graph, "pkg.svc.component") == {"pkg.svc.spec"}


def test_each_layer_rule_of_modules_k8s_fires(tmp_path: Path) -> None:
    k8s = "modules/k8s"
    graph = _write(
        tmp_path,
        {
            "modules/__init__.py": "",
            f"{k8s}/__init__.py": "",
            f"{k8s}/names.py": "from modules.k8s.gpu.spec import X\n",
            f"{k8s}/gpu/__init__.py": "",
            f"{k8s}/gpu/spec.py": "X = 1\n",
            f"{k8s}/gpu/extra.py": "from modules.k8s.gpu.component import G\n",
            f"{k8s}/gpu/component.py": "from modules.k8s.platform.spec import Args\nG = 1\n",
            f"{k8s}/fabric/__init__.py": "",
            f"{k8s}/fabric/spec.py": "from modules.k8s.platform.spec import Args\n",
            f"{k8s}/fabric/component.py": "from modules.k8s.gpu.component import G\n",
            f"{k8s}/platform/__init__.py": "",
            f"{k8s}/platform/spec.py": "from modules.k8s.gpu.component import G\nArgs = 1\n",
            f"{k8s}/platform/component.py": "from modules.k8s.gpu.component import G\n",
        },
        rooms=["modules"],
    )
    wrong = layer_violations(graph)
    assert sorted(w.split(": ", 1)[1].split(" (")[0] for w in wrong) == [
        "modules.k8s.fabric.component -> modules.k8s.gpu.component",
        "modules.k8s.fabric.spec -> modules.k8s.platform",
        "modules.k8s.fabric.spec -> modules.k8s.platform.spec",
        "modules.k8s.gpu.extra -> modules.k8s.gpu.component",
        "modules.k8s.names -> modules.k8s.gpu",
        "modules.k8s.names -> modules.k8s.gpu.spec",
        "modules.k8s.platform.spec -> modules.k8s.gpu.component",
    ]
