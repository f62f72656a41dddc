"""The floor plan (docs/architecture.md): dlbench's imports, function-level ones included, form
no cycle and never reach into a later stage."""

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "dlbench"
# Import order of the stages; the contracts are the top-level modules, data/ and the runner
# interface (the registry, `base`, `plugin`, `profilers`); the frameworks behind it come next.
STAGES = [
    "contracts",
    "frameworks",
    "launch",
    "images",
    "planning",
    "analysis",
    "findings",
    "plots",
    "campaigns",
    "report",
]
CONTRACT_FOLDERS = {"data"}
RUNNER_CONTRACT = {"dlbench.runners", "dlbench.runners.base", "dlbench.runners.plugin", "dlbench.runners.profilers"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def stage(module: str) -> str:
    parts = module.split(".")
    if module.startswith("dlbench.runners"):
        return "contracts" if module in RUNNER_CONTRACT else "frameworks"
    if len(parts) == 1 or f"dlbench.{parts[1]}" in MODULES and not (PACKAGE / parts[1]).is_dir():
        return "contracts"
    return "contracts" if parts[1] in CONTRACT_FOLDERS else parts[1]


def known(name: str) -> str:
    """The module an imported name lives in (a name imported from a package may be a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {known(a.name) for a in node.names if a.name.startswith("dlbench")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(kept + ([base] if base else []))
            if base.startswith("dlbench"):
                found |= {known(f"{base}.{a.name}") for a in node.names}
    return found - {module, ""}


GRAPH = {module: imports_of(module) for module in MODULES}


def test_the_imports_form_no_cycle():
    try:
        tuple(TopologicalSorter(GRAPH).static_order())
    except CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None


def test_no_module_imports_from_a_later_stage():
    later = [
        f"{module} ({stage(module)}) imports {target} ({stage(target)})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if STAGES.index(stage(target)) > STAGES.index(stage(module))
    ]
    assert later == []


def test_every_package_is_a_stage_and_the_top_level_holds_contracts_only():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(STAGES) | CONTRACT_FOLDERS | {"runners"}
    top = {p.stem for p in PACKAGE.glob("*.py")}
    contracts = {
        "coords",
        "models",
        "model_kinds",
        "llm",
        "pipelining",
        "recipe",
        "protocol",
        "steplog",
        "schemas",
        "provenance",
        "files",
        "labels",
        "devices",
    }
    assert top == {"__init__", *contracts}


# The model-kind seam (docs/plugins.md, "Adding a model kind"): a model's kind is read through
# its descriptor (dlbench.model_kinds, `dlbench.models.kind_of`) and nowhere else: no stage and
# no runner asks a model's kind by name. The descriptors and the catalogue are the exceptions.
KIND_DESCRIPTORS = {PACKAGE / "model_kinds.py", PACKAGE / "models.py"}
KIND_FLAG = re.compile(r"_?is_(image|cnn|text|bert|llm|lm)")


def _catalogue_names(tree) -> set[str]:
    """Names bound to a catalogue entry (`entry = CATALOGUE[m]`, `for m, entry in CATALOGUE.items()`)."""
    names = set()
    for node in ast.walk(tree):
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.For, ast.comprehension)):
            targets, value = [node.target], node.iter
        if value is not None and "CATALOGUE" in ast.unparse(value):
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _reads_kind(node, entries: set[str]) -> bool:
    """`<entry>["kind"]` or `<entry>.get("kind")` on a catalogue entry."""
    if isinstance(node, ast.Subscript) and getattr(node.slice, "value", None) == "kind":
        target = node.value
    elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get" and node.args:
        target = node.func.value if getattr(node.args[0], "value", None) == "kind" else None
    else:
        return False
    return target is not None and ("CATALOGUE" in ast.unparse(target) or ast.unparse(target) in entries)


def _compared_constants(node: ast.Compare) -> list[str]:
    """The strings a comparison compares with directly (or in a literal tuple, list or set)."""
    found = []
    for side in (node.left, *node.comparators):
        items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        found += [c.value for c in items if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return found


def kind_branches(paths) -> list[str]:
    """Where code branches on a model kind: an `is_<kind>` flag, a catalogue entry's `"kind"`
    read, or a comparison with a kind or with the name of a model that is no image model (a
    family of its own; an image model's name picks an architecture inside the image workload)."""
    from dlbench.models import CATALOGUE

    kinds = {entry["kind"] for entry in CATALOGUE.values()}
    selecting = kinds | {model for model, entry in CATALOGUE.items() if entry["kind"] != "image"}
    found = []
    for path in paths:
        tree = ast.parse(path.read_text())
        entries = _catalogue_names(tree)
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}  # a predicate's body is scanned
        for node in ast.walk(tree):
            where = f"{path.relative_to(path.parents[2])}:{getattr(node, 'lineno', 0)}"
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
            if KIND_FLAG.fullmatch(name) and id(node) not in called:
                found.append(f"{where}: {name}")
            elif _reads_kind(node, entries):
                found.append(f"{where}: reads a model's kind")
            elif isinstance(node, ast.Compare):
                found += [f"{where}: compares with {c!r}" for c in _compared_constants(node) if c in selecting]
    return found


def scanned_for_kinds(root: Path) -> list[Path]:
    paths = sorted((root / "dlbench").rglob("*.py")) + sorted((root / "tests" / "plugins").glob("*.py"))
    return [p for p in paths if p not in {root / c.relative_to(REPO) for c in KIND_DESCRIPTORS}]


def runner_modules(root: Path) -> list[Path]:
    return sorted((root / "dlbench" / "runners").rglob("*.py")) + sorted((root / "tests" / "plugins").glob("*.py"))


def test_no_module_branches_on_a_model_kind():
    assert kind_branches(scanned_for_kinds(REPO)) == []


def test_a_planted_kind_branch_is_found(tmp_path):
    planted = tmp_path / "dlbench" / "planning" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(
        "from dlbench.models import CATALOGUE\n"
        "def f(model, sizes):\n"
        "    entry = CATALOGUE[model]\n"
        "    if entry['kind'] == 'llm':\n"
        "        return sizes[1]\n"
        "    is_text = CATALOGUE.get(model, {}).get('kind') in ('text',)\n"
        "    return model == 'bert_base' or is_text\n"
    )
    found = sorted(f.removeprefix("dlbench/planning/planted.py:") for f in kind_branches([planted]))
    assert found == [
        "4: compares with 'llm'",
        "4: reads a model's kind",
        "6: compares with 'text'",
        "6: is_text",
        "6: reads a model's kind",
        "7: compares with 'bert_base'",
        "7: is_text",
    ], found
    innocent = tmp_path / "dlbench" / "planning" / "innocent.py"
    innocent.write_text("def f(lock, manifest):\n    return lock['image'] != 'x' and manifest['kind'] == 'site'\n")
    assert kind_branches([innocent]) == []


def runner_internals(paths) -> list[str]:
    """Imports, outside dlbench/runners, of a framework's modules (behind the runner interface,
    RUNNER_CONTRACT) or of a private name of the runners."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dlbench.runners"):
                names = [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if not name.startswith("dlbench.runners"):
                    continue
                module = known(name)
                private = any(part.startswith("_") for part in name.split("."))
                if private or module not in RUNNER_CONTRACT:
                    found.append(f"{path.name}:{node.lineno}: {name}")
    return found


def test_no_stage_reaches_into_the_runners():
    outside = [p for p in PACKAGE.rglob("*.py") if "runners" not in p.relative_to(PACKAGE).parts]
    assert runner_internals(outside) == []


def test_a_planted_reach_into_a_runner_is_found(tmp_path):
    planted = tmp_path / "flops.py"
    planted.write_text(
        "from dlbench.runners import capabilities\n"
        "from dlbench.runners.base import RunSpec\n"
        "def count():\n"
        "    from dlbench.runners.pytorch import Runner\n"
        "    from dlbench.runners import _workload_class\n"
        "    import dlbench.runners.jax.llm\n"
    )
    assert runner_internals([planted]) == [
        "flops.py:4: dlbench.runners.pytorch.Runner",
        "flops.py:5: dlbench.runners._workload_class",
        "flops.py:6: dlbench.runners.jax.llm",
    ]


def test_a_framework_builds_the_models_of_its_workloads():
    """Each plug-in's model list is its registered workloads' (no hand-written list), and its
    CAPABILITIES says so in its source: `models=WORKLOADS.models`."""
    from dlbench.runners import capabilities, framework_module, framework_names

    for name in framework_names():
        assert capabilities(name).models == framework_module(name).WORKLOADS.models, name
    for path in runner_modules(REPO):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Capabilities":
                models = [k.value for k in node.keywords if k.arg == "models"]
                assert [ast.unparse(m).endswith("WORKLOADS.models") for m in models] == [True], path


def test_a_workload_registry_takes_one_class_per_kind_of_that_kinds_models():
    import pytest

    from dlbench.runners.base import Workload, Workloads

    registry = Workloads("example")

    @registry.registers
    class Images(Workload):
        kind, models = "image", ("resnet50", "vgg16")

    assert registry("vgg16") is Images and registry.models == ("resnet50", "vgg16")
    with pytest.raises(ValueError, match="no workload trains 'alexnet'"):
        registry("alexnet")
    with pytest.raises(ValueError, match="no workload trains 'bert_base'"):
        registry("bert_base")
    for kind, models in (("image", ("alexnet",)), ("text", ("resnet50",)), ("moe", ("resnet50",)), ("llm", ())):
        with pytest.raises(ValueError, match="workload Other"):
            registry.registers(type("Other", (Workload,), {"kind": kind, "models": models}))


# Snakemake behind one adapter (docs/architecture.md, "Planning's edge"): planning and every
# stage below it import Snakemake's API through planning/snakemake_api.py alone.
SNAKEMAKE_ADAPTER = PACKAGE / "planning" / "snakemake_api.py"


def snakemake_importers(paths) -> list[str]:
    """`file:line` of each import of Snakemake (function-level ones included)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "snakemake" or n.startswith("snakemake.") for n in names):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_snakemake_is_imported_through_its_adapter_alone(tmp_path):
    below = [*PACKAGE.glob("*.py")]
    for stage in ("planning", "images", "launch", "runners", "data"):
        below += sorted((PACKAGE / stage).rglob("*.py"))
    assert snakemake_importers(p for p in below if p != SNAKEMAKE_ADAPTER) == []
    assert snakemake_importers([SNAKEMAKE_ADAPTER])  # the adapter does import it
    planted = tmp_path / "planted.py"  # and a function-level import is found
    planted.write_text("def f():\n    from snakemake.io import ancient\n")
    assert snakemake_importers([planted]) == ["planted.py:2"]


def test_no_module_outside_the_table_contract_names_a_column_by_string():
    """The table contract's seam (docs/architecture.md; the scan is tests/test_table_contract.py's)."""
    from tests.test_table_contract import column_literals, scanned_modules

    assert [f"{p.name}:{n.lineno}" for p in scanned_modules() for n, _ in column_literals(p)] == []


def test_only_plots_draws_and_its_users_import_it_at_the_top():
    """matplotlib is imported in dlbench/plots/ alone (campaigns keeps a history's data, plots
    draws it), and dlbench.plots is never imported inside a function: a lazy import would hide
    which stage sits on which."""
    drawing, lazy = [], []
    for module, path in sorted(MODULES.items()):
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if stage(module) != "plots" and any(n.split(".")[0] == "matplotlib" for n in names):
                drawing.append(module)
            if id(node) not in top and any(n.startswith("dlbench.plots") for n in names):
                lazy.append(f"{module}:{node.lineno}")
    assert drawing == [] and lazy == []
