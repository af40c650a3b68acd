"""dvc.yaml tells the truth: each stage's `deps` cover the code the stage runs, and name nothing it does not.

A stage's code is the import closure of its module `soarlab.stages.<name>` (every `import` in the
module, also inside functions, followed through soarlab), plus the modules its subprocesses run
(`[python, "-m", "soarlab.x"]`, e.g. the transformers engine's launcher), plus the data files those
modules name (e.g. `corpus.txt`, the lm-eval task folder). Left out on purpose (HARNESS): the code
that loads params.yaml, finds the project, formats errors, writes files atomically and quiets known
library warnings. It decides no output's content, and listing it would re-run the whole pipeline
for a change of an error message.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

SRC = ROOT / "src"
PKG = SRC / "soarlab"
HARNESS = {"soarlab", "soarlab.cli", "soarlab.stages", "soarlab.config", "soarlab.schema", "soarlab.errors",
           "soarlab.paths", "soarlab.atomic", "soarlab.quiet"}
STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def module_file(name: str) -> Path | None:
    path = SRC.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _parents(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__, a/b/__init__ too."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def direct_uses(name: str) -> tuple[set[str], set[str]]:
    """(soarlab modules `name` imports or runs with `-m`, names it joins into paths)."""
    tree = ast.parse(module_file(name).read_text())
    package = name if module_file(name).name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    strings: set[str] = set()
    # Imports under `if TYPE_CHECKING:` never run; they are for the type checker only.
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}"))
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found.update(items[i + 1] for i, v in enumerate(items[:-1]) if v == "-m" and isinstance(items[i + 1], str))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # a path join: Path(...) / "name"
            strings.update(n.value for n in (node.left, node.right) if isinstance(n, ast.Constant))
    modules = {p for m in found if m.startswith("soarlab") and module_file(m) for p in _parents(m)}
    return modules, strings


def data_files(names: set[str]) -> set[Path]:
    """Files under src/soarlab a module joins into a path by their name, or by the name of a data folder
    (no __init__.py) holding them, e.g. tiny/remote/ copied into every tiny model."""
    def named(path: Path) -> bool:
        folders = [f for f in path.parents if PKG in f.parents and not (f / "__init__.py").is_file()]
        return path.name in names or any(f.name in names for f in folders)

    return {p for p in PKG.rglob("*") if p.is_file() and "__pycache__" not in p.parts and named(p)}


def closure(root: str) -> set[Path]:
    """Every file under src/ that running module `root` runs or reads (harness left out)."""
    todo, seen, strings = [root], set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in HARNESS:  # nor what the harness itself uses (e.g. the stage runner's timing record)
            continue
        modules, consts = direct_uses(name)
        strings |= consts
        todo += sorted(modules - seen)
    return {module_file(m) for m in seen - HARNESS} | data_files(strings)


def stage_code(stage: str) -> set[Path]:
    return closure(f"soarlab.stages.{stage.replace('-', '_')}")


def declared(stage: str) -> list[Path]:
    return [ROOT / d for d in STAGES[stage].get("deps", []) if str(d).startswith("src/")]


def covered(path: Path, deps: list[Path]) -> bool:
    return any(path == d or d in path.parents for d in deps)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_deps_cover_the_stage_code(stage):
    missing = sorted(str(p.relative_to(ROOT)) for p in stage_code(stage) if not covered(p, declared(stage)))
    assert not missing, f"dvc.yaml stage {stage} runs these files but does not list them in deps: {missing}"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_deps_name_only_code_the_stage_runs(stage):
    code = stage_code(stage)
    unused = sorted(str(d.relative_to(ROOT)) for d in declared(stage) if not any(covered(p, [d]) for p in code))
    assert not unused, f"dvc.yaml stage {stage} lists deps it never runs (they re-run it for nothing): {unused}"


def test_every_module_is_some_stage_code_or_a_tool():
    """A module no stage runs is harness, the code of a `soarlab` command (cli.py's "module:function"
    handlers) or a class Hydra instantiates (a `_target_:` in conf/, e.g. the sweep's callback);
    anything else is dead, or a stage runs it without dvc.yaml knowing."""
    commands = re.findall(r'"(soarlab[\w.]*):\w+"', (PKG / "cli.py").read_text())
    conf = "".join(f.read_text() for f in (ROOT / "conf").rglob("*.yaml"))
    commands += re.findall(r"_target_:\s*(soarlab[\w.]*)\.\w+", conf)
    used = set().union(*(stage_code(s) for s in STAGES), *(closure(m) for m in commands))
    helpers = {PKG / "bench" / "loopback.py"}  # the local streaming server of the tests and scripts/
    orphans = sorted(
        str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
        if p not in used | helpers and ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__") not in HARNESS
    )
    assert not orphans, f"modules that neither a stage nor a command runs: {orphans}"


def imported_modules(name: str) -> set[str]:
    """The soarlab modules `name` names in an import (also inside functions), without the parent packages
    Python runs on the way: those are how packages load, not a dependency of one module on another."""
    tree = ast.parse(module_file(name).read_text())
    package = name if module_file(name).name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            named = {f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}")}
            found |= named or {base}
    return {m for m in found if m.startswith("soarlab") and module_file(m) and m != name}


def all_modules() -> list[str]:
    return sorted(".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
                  for p in PKG.rglob("*.py"))


def test_the_import_graph_has_no_cycle():
    """Layers point one way: e.g. decide uses tracking, tracking never decide. A cycle is reported as its path."""
    graph = {m: imported_modules(m) for m in all_modules()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target] if target in path else [module, target]
            if target not in state:
                cycle = visit(target, path + [target])
                if cycle:
                    return cycle
        state[module] = 2
        return None

    for module in graph:
        if module not in state:
            cycle = visit(module, [module])
            assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_no_module_imports_a_private_name():
    """`_name` is a module's own business: another module (ours or a library's) importing it breaks when
    that module changes. Covers `from x import _y` and `x._y` modules, in src/ and the Hydra plugin."""
    private = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = (node.module or "").split(".") + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [part for a in node.names for part in a.name.split(".")]
            else:
                continue
            if any(n.startswith("_") and not n.startswith("__") for n in names):
                private.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not private, f"imports of private names: {private}"
