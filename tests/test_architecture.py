"""The floor plan (docs/architecture.md): dlbench's imports, function-level ones included, form
no cycle and never reach into a later stage."""

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "dlbench"
# Import order of the stages; the contracts are the top-level modules, runners/ and data/.
STAGES = ["contracts", "launch", "images", "planning", "analysis", "findings", "plots", "campaigns", "report"]
CONTRACT_FOLDERS = {"runners", "data"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def stage(module: str) -> str:
    parts = module.split(".")
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
    assert packages <= set(STAGES) | CONTRACT_FOLDERS
    top = {p.stem for p in PACKAGE.glob("*.py")}
    contracts = {"coords", "models", "llm", "workload", "protocol", "steplog", "provenance", "files", "labels"}
    assert top == {"__init__", *contracts}
