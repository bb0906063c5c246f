"""What each stage image imports, read from the source with `ast` (nothing is imported).

For every ``Dockerfile`` under ``workloads/`` the test takes the modules the image runs
(its ``ENTRYPOINT``/``CMD``, the pipeline steps of its stage, and the commands the
Pulumi side gives its containers), follows every import the project's sources name
(`tests.test_import_cycles.import_graph`: imports inside functions and under
``TYPE_CHECKING`` included, each package above a module counted), and fails when that
closure

* imports a Pulumi SDK (``pulumi``, ``pulumi_aws``, ``pulumi_kubernetes``,
  ``pulumi_policy``), or a module of the Pulumi rooms other than the shared checker
  ``modules.validation``;
* reaches a project module the Dockerfile does not ``COPY`` to where the image's
  ``PYTHONPATH`` finds it;

and when the Dockerfile copies a package none of whose modules the closure reaches (an
image copies only what it imports). A script the platform mounts into an upstream image
(the MLflow server's user sync) may import the standard library only.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import pytest

from tests.test_import_cycles import ROOMS, Edge, import_graph, module_name, project_modules

ROOT = Path(__file__).resolve().parents[1]
#: The Pulumi SDKs: no stage image may import one.
PULUMI = frozenset({"pulumi", "pulumi_aws", "pulumi_kubernetes", "pulumi_policy"})
#: What an image may take from the Pulumi rooms (`modules/`): the all-errors-at-once
#: checker, standard library only, shared by the stack config and the workloads' own
#: configs (ARCHITECTURE.md, "The rooms").
SHARED_FROM_MODULES = frozenset({"modules", "modules.validation"})

#: The pipeline's steps run in these images (the keys are `workloads.pipelines.steps`'s
#: ``STAGE_IMAGES`` values; the steps are read from that module with `ast`).
PIPELINE_IMAGES = {
    "data": "workloads/data/Dockerfile",
    "training": "workloads/Dockerfile",
    "lifecycle": "workloads/tracking/Dockerfile",
}
#: What the Pulumi side runs in an image besides its default command: module ->
#: (Dockerfile, run as a file rather than with ``-m``). Every ``-m workloads...`` and
#: ``/app/workloads/...py`` the sources of `modules/` and `stacks/` name must be here,
#: in a Dockerfile's own command or a pipeline step
#: (`test_every_module_the_platform_runs_is_an_entry_of_an_image`).
PLATFORM_ENTRIES = {
    # The TrainingJob's and the runtimes' commands (modules/k8s/trainer/).
    "workloads.train": ("workloads/Dockerfile", False),
    "workloads.health": ("workloads/Dockerfile", False),
    "workloads.fabric_check": ("workloads/Dockerfile", False),
    # The fine-tuning TrainJob's trainer step (modules/k8s/trainer/finetune_job.py).
    "workloads.finetune": ("workloads/finetune/Dockerfile", False),
    # The MPI runtime's default program.
    "workloads.horovod.train": ("workloads/horovod/Dockerfile", True),
    # The SparkApplication's main file (modules/k8s/spark/spec.py MAIN_FILE).
    "workloads.data.prepare": ("workloads/data/Dockerfile", True),
    # The drift service beside each InferenceService (the predictor image).
    "workloads.serving.drift_service": ("workloads/serving/Dockerfile", False),
    # The feature store's Jobs (`apply`, `train`); the feature server and the
    # materialisation CronJob (`feast ...`) unpickle the on-demand feature view's
    # function from the feature repository's module.
    "workloads.features": ("workloads/features/Dockerfile", False),
    "workloads.features.repo": ("workloads/features/Dockerfile", False),
}
#: Images the Pulumi side runs whose Dockerfile is not in this repository: the KFP
#: publisher and retrain trigger run in the platform's pipelines image.
NOT_BUILT_HERE = ("workloads.pipelines",)
#: Images that run an upstream program and copy no project code: Dockerfile -> the module
#: its ENTRYPOINT runs (vLLM's OpenAI server for the CPU pools; tests/k8s/test_llm.py
#: checks that image against the Deployment that runs it).
UPSTREAM_PROGRAM_IMAGES = {"workloads/llm/Dockerfile": "vllm.entrypoints.openai.api_server"}
#: Scripts the platform mounts into an upstream image (a ConfigMap): standard library only.
MOUNTED_SCRIPTS = {
    "workloads/tracking/sync_users.py": "the MLflow server's image (modules/k8s/tracking)",
}


class Run(NamedTuple):
    """How an image runs a module: where that is said, and whether as a file
    (``python /app/x/y.py``: the packages above it are not imported first)."""

    why: str
    as_file: bool = False


@dataclass
class Image:
    """What a Dockerfile says about its Python code.

    Args:
        path: the Dockerfile, relative to the repository root.
        copied: each project file it copies -> where it lands in the image.
        copy_sources: each project file or folder named as a ``COPY`` source.
        pythonpath: where ``python -m`` finds the project's packages.
        commands: its ``ENTRYPOINT`` and ``CMD``, as argument lists.
    """

    path: str
    copied: dict[str, PurePosixPath] = field(default_factory=dict)
    copy_sources: list[str] = field(default_factory=list)
    pythonpath: PurePosixPath = field(default_factory=lambda: PurePosixPath("/app"))
    commands: list[list[str]] = field(default_factory=list)


def _instructions(text: str) -> Iterable[tuple[str, str]]:
    """(INSTRUCTION, its arguments) of a Dockerfile, continuation lines joined."""
    logical = re.sub(r"\\\n", " ", text)
    for raw in logical.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            yield keyword.upper(), rest.strip()


def _arguments(rest: str) -> list[str]:
    """An instruction's arguments, in exec (JSON) or shell form."""
    if rest.startswith("["):
        return [str(a) for a in ast.literal_eval(rest)]
    return shlex.split(rest)


def read_dockerfile(path: Path, root: Path) -> Image:
    """The Dockerfile's copies of project files, ``PYTHONPATH`` and commands. A
    Dockerfile without ``PYTHONPATH`` is taken to use ``/app``, where the image it is
    built from (the training image, for Horovod's) has its code."""
    image = Image(str(path.relative_to(root)))
    workdir = PurePosixPath("/")
    for keyword, rest in _instructions(path.read_text(encoding="utf-8")):
        if keyword == "WORKDIR":
            workdir = workdir / rest
        elif keyword == "ENV":
            found = re.search(r"(?:^|\s)PYTHONPATH=(\S+)", rest)
            if found:
                image.pythonpath = PurePosixPath(found.group(1))
        elif keyword in ("ENTRYPOINT", "CMD"):
            image.commands.append(_arguments(rest))
        elif keyword == "COPY":
            if any(a.startswith("--from") for a in _arguments(rest)):
                continue  # from another stage or image, not from the repository
            args = [a for a in _arguments(rest) if not a.startswith("--")]
            *sources, target = args
            dest = workdir / target
            for source in sources:
                local = root / source
                if local.is_dir():
                    image.copy_sources.append(source.rstrip("/"))
                    for file in sorted(local.rglob("*.py")):
                        inner = file.relative_to(local).as_posix()
                        image.copied[file.relative_to(root).as_posix()] = dest / inner
                elif local.is_file():
                    image.copy_sources.append(source)
                    into = dest / local.name if target.endswith("/") else dest
                    image.copied[source] = into
    return image


def _module_of_path(path: str, root: Path) -> str:
    return module_name(root / path, root)


def image_entries(image: Image, root: Path) -> dict[str, Run]:
    """Module -> how it runs, for the image's own commands: ``python -m <module>`` or
    ``python <file under the image's code>``."""
    entries: dict[str, Run] = {}
    for command in image.commands:
        why = f"{image.path}: {shlex.join(command)}"
        for i, arg in enumerate(command):
            if arg == "-m" and i + 1 < len(command):
                entries[command[i + 1]] = Run(why)
            elif arg.endswith(".py") and PurePosixPath(arg).is_relative_to(image.pythonpath):
                relative = PurePosixPath(arg).relative_to(image.pythonpath).as_posix()
                entries[_module_of_path(relative, root)] = Run(why, as_file=True)
    return entries


def pipeline_steps(root: Path) -> list[tuple[str, str]]:
    """(image name, module) of each step in `workloads.pipelines.steps`, read with ast:
    the ``Step(name, stage, module, args)`` calls and ``STAGE_IMAGES``."""
    tree = ast.parse((root / "workloads/pipelines/steps.py").read_text(encoding="utf-8"))
    stage_images: dict[str, str] = {}
    steps: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "STAGE_IMAGES" for t in node.targets
        ):
            stage_images = ast.literal_eval(node.value)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Step":
            stage, module = (ast.literal_eval(a) for a in node.args[1:3])
            steps.append((stage, module))
    assert stage_images and steps, "workloads/pipelines/steps.py: no STAGE_IMAGES or Step(...)"
    return [(stage_images[stage], module) for stage, module in steps]


def all_entries(root: Path, dockerfiles: Iterable[str]) -> dict[str, dict[str, Run]]:
    """Dockerfile -> {module it runs -> how}."""
    entries = {d: image_entries(read_dockerfile(root / d, root), root) for d in sorted(dockerfiles)}
    for image, module in pipeline_steps(root):
        entries[PIPELINE_IMAGES[image]][module] = Run(f"pipeline step (image {image})")
    for module, (dockerfile, as_file) in PLATFORM_ENTRIES.items():
        entries[dockerfile].setdefault(module, Run("PLATFORM_ENTRIES", as_file))
    return entries


def _runnable(module: str, modules: Mapping[str, Path]) -> str:
    """``python -m package`` runs ``package.__main__``."""
    main = f"{module}.__main__"
    return main if main in modules else module


def closure(entries: Mapping[str, Run], graph: Mapping[str, list[Edge]]) -> dict[str, Edge | None]:
    """Every project module that running ``entries`` imports -> the import that first
    reaches it (None for the entries and, for ``-m``, the packages above them, which
    Python imports first)."""
    came_from: dict[str, Edge | None] = {}
    todo: list[str] = []
    for entry, run in entries.items():
        parts = entry.split(".")
        first = len(parts) if run.as_file else 1
        for name in [".".join(parts[:i]) for i in range(first, len(parts) + 1)]:
            if name in graph and name not in came_from:
                came_from[name] = None
                todo.append(name)
    while todo:
        for edge in graph[todo.pop()]:
            if edge.target not in came_from:
                came_from[edge.target] = edge
                todo.append(edge.target)
    return came_from


def _chain(module: str, came_from: Mapping[str, Edge | None]) -> str:
    """How ``module`` is reached: ``entry -> a (file:line) -> module (file:line)``."""
    steps: list[str] = []
    while (edge := came_from[module]) is not None:
        steps.insert(0, f"-> {edge.target} ({edge.path}:{edge.line})")
        module = edge.source
    return " ".join([module, *steps])


def external_imports(path: Path) -> list[tuple[str, int]]:
    """(top-level name, line) of every absolute import in the file, project or not."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def image_problems(
    dockerfile: str,
    entries: Mapping[str, Run],
    root: Path,
    modules: Mapping[str, Path],
    graph: Mapping[str, list[Edge]],
) -> list[str]:
    """Everything wrong with what ``dockerfile``'s image imports (module docstring)."""
    image = read_dockerfile(root / dockerfile, root)
    wrong = [f"{dockerfile}: runs {m} ({run.why}), not a module here" for m, run in
             entries.items() if m not in modules]  # fmt: skip
    reached = closure({_runnable(m, modules): r for m, r in entries.items() if m in modules}, graph)
    importable = {
        module_name(root / f, root)
        for f, at in image.copied.items()
        if at.is_relative_to(image.pythonpath) and at.relative_to(image.pythonpath).as_posix() == f
    }
    for module in sorted(reached):
        relative = modules[module].relative_to(root).as_posix()
        how = _chain(module, reached)
        if module.split(".")[0] in ("stacks", "policies", "tools", "tests") or (
            module.startswith("modules") and module not in SHARED_FROM_MODULES
        ):
            wrong.append(f"{dockerfile}: imports {module}, Pulumi-side code: {how}")
        if module not in importable:
            wrong.append(f"{dockerfile}: imports {module} but does not COPY {relative}: {how}")
        for name, line in external_imports(modules[module]):
            if name in PULUMI:
                wrong.append(f"{dockerfile}: imports {name} ({relative}:{line}): {how}")
    # An image copies only the packages it imports: every folder of Python code it
    # copies holds a module the closure reaches, and every file it names is reached.
    for source in image.copy_sources:
        local = root / source
        if local.is_file():
            if local.suffix == ".py" and _module_of_path(source, root) not in reached:
                wrong.append(f"{dockerfile}: copies {source}, which nothing it runs imports")
            continue
        folders = {p.parent for p in local.rglob("*.py")}
        for folder in sorted(folders):
            names = {module_name(p, root) for p in folder.glob("*.py")}
            if not names & set(reached):
                wrong.append(
                    f"{dockerfile}: copies {folder.relative_to(root).as_posix()}/, "
                    "which nothing it runs imports"
                )
    return wrong


def dockerfiles(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / "workloads").rglob("Dockerfile"))


@pytest.fixture(scope="module")
def project() -> tuple[dict[str, Path], dict[str, list[Edge]]]:
    modules = project_modules(ROOT, ROOMS)
    return modules, import_graph(modules, ROOT)


@pytest.mark.parametrize(
    "dockerfile", [d for d in dockerfiles(ROOT) if d not in UPSTREAM_PROGRAM_IMAGES]
)
def test_an_image_imports_no_pulumi_and_copies_what_it_imports(
    dockerfile: str, project: tuple[dict[str, Path], dict[str, list[Edge]]]
) -> None:
    modules, graph = project
    entries = all_entries(ROOT, dockerfiles(ROOT))[dockerfile]
    assert entries, f"{dockerfile}: no module found that the image runs"
    assert not (wrong := image_problems(dockerfile, entries, ROOT, modules, graph)), "\n".join(
        wrong
    )


@pytest.mark.parametrize("dockerfile", sorted(UPSTREAM_PROGRAM_IMAGES))
def test_an_image_of_an_upstream_program_runs_it_and_copies_no_project_code(
    dockerfile: str,
) -> None:
    image = read_dockerfile(ROOT / dockerfile, ROOT)
    assert image.commands == [["python", "-m", UPSTREAM_PROGRAM_IMAGES[dockerfile]]], dockerfile
    code = [s for s in image.copy_sources if (ROOT / s).is_dir() or s.endswith(".py")]
    assert not code, f"{dockerfile} copies project code: {code}"
    assert UPSTREAM_PROGRAM_IMAGES[dockerfile].split(".")[0] not in project_modules(ROOT, ROOMS)


def test_every_module_the_platform_runs_is_an_entry_of_an_image() -> None:
    """The commands the Pulumi side writes (``-m workloads...``, a file under
    ``/app/workloads``) each name a module one of the images runs, so the test above
    follows it."""
    named: dict[str, str] = {}
    for room in ("modules", "stacks"):
        for path in sorted((ROOT / room).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            where = path.relative_to(ROOT).as_posix()
            for module in re.findall(r"""-m["',\s]+(workloads(?:\.\w+)+)""", text):
                named[module] = where
            for file in re.findall(r"/app/(workloads/[\w/]+\.py)", text):
                named[_module_of_path(file, ROOT)] = where
    assert {"workloads.train", "workloads.features", "workloads.data.prepare"} <= set(named)
    entries = all_entries(ROOT, dockerfiles(ROOT))
    covered = {m for image in entries.values() for m in image}
    missing = [
        f"{module} (named in {where})"
        for module, where in sorted(named.items())
        if module not in covered and not module.startswith(NOT_BUILT_HERE)
    ]
    assert not missing, "run by the platform but no image lists it: " + ", ".join(missing)


@pytest.mark.parametrize("script", sorted(MOUNTED_SCRIPTS))
def test_a_script_mounted_into_an_upstream_image_needs_only_the_standard_library(
    script: str,
) -> None:
    imported = external_imports(ROOT / script)
    assert imported, script
    outside = [f"{name} (line {line})" for name, line in imported
               if name not in sys.stdlib_module_names]  # fmt: skip
    assert not outside, f"{script} runs in {MOUNTED_SCRIPTS[script]}: imports {outside}"


# -- the check itself, on a small tree: each rule fires --


def _tree(root: Path, files: Mapping[str, str]) -> tuple[dict[str, Path], dict[str, list[Edge]]]:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    modules = project_modules(root, ("modules", "workloads"))
    return modules, import_graph(modules, root)


SMALL = {
    "modules/__init__.py": "",
    "modules/validation.py": "import re\n",
    "modules/k8s/__init__.py": "",
    "modules/k8s/spec.py": "import pulumi\n",
    "workloads/__init__.py": "",
    "workloads/train/__init__.py": "",
    "workloads/train/__main__.py": "from modules.validation import re\n",
    "workloads/train/lazy.py": "",
    "workloads/other/__init__.py": "",
    "workloads/other/x.py": "",
}
DOCKERFILE = """FROM python:3.11-slim
WORKDIR /app
COPY modules/__init__.py modules/validation.py /app/modules/
COPY workloads/__init__.py workloads/
COPY workloads/train/ workloads/train/
ENV PYTHONPATH=/app
ENTRYPOINT ["python", "-m", "workloads.train"]
"""


def _problems(root: Path, files: Mapping[str, str], dockerfile: str) -> list[str]:
    modules, graph = _tree(root, {**files, "workloads/train/Dockerfile": dockerfile})
    path = "workloads/train/Dockerfile"
    entries = image_entries(read_dockerfile(root / path, root), root)
    return image_problems(path, entries, root, modules, graph)


def test_the_check_passes_an_image_that_copies_its_closure(tmp_path: Path) -> None:
    assert _problems(tmp_path, SMALL, DOCKERFILE) == []


def test_the_check_refuses_an_image_whose_closure_imports_pulumi(tmp_path: Path) -> None:
    # A function-level import counts: the image would fail when the function runs.
    files = {
        **SMALL,
        "workloads/train/lazy.py": "def f() -> None:\n    import pulumi\n",
        "workloads/train/__main__.py": "import modules.validation\nfrom . import lazy\n",
    }
    (problem,) = _problems(tmp_path, files, DOCKERFILE)
    assert "imports pulumi (workloads/train/lazy.py:2)" in problem
    assert "-> workloads.train.lazy (workloads/train/__main__.py:2)" in problem


def test_the_check_refuses_pulumi_side_code_and_what_is_not_copied(tmp_path: Path) -> None:
    files = {**SMALL, "workloads/train/__main__.py": "from modules.k8s import spec\n"}
    problems = _problems(tmp_path, files, DOCKERFILE)
    assert any("imports modules.k8s.spec, Pulumi-side code" in p for p in problems)
    assert any("does not COPY modules/k8s/spec.py" in p for p in problems)
    assert any("imports pulumi (modules/k8s/spec.py:1)" in p for p in problems)
    # ... and the shared checker, now unused, is copied for nothing.
    assert any("copies modules/validation.py, which nothing" in p for p in problems)


def test_the_check_refuses_a_package_copied_to_the_wrong_place_or_not_at_all(
    tmp_path: Path,
) -> None:
    moved = DOCKERFILE.replace("COPY workloads/train/ workloads/train/", "COPY workloads/train/ t/")
    assert any(
        "does not COPY workloads/train/__main__.py" in p for p in _problems(tmp_path, SMALL, moved)
    )


def test_the_check_refuses_a_package_the_image_does_not_import(tmp_path: Path) -> None:
    whole = DOCKERFILE.replace(
        "COPY workloads/__init__.py workloads/\nCOPY workloads/train/ workloads/train/",
        "COPY workloads/ workloads/",
    )
    assert _problems(tmp_path, SMALL, whole) == [
        "workloads/train/Dockerfile: copies workloads/other/, which nothing it runs imports"
    ]
