"""dvc.yaml tells the truth: each stage's `deps` cover the code the stage runs, and name nothing it does not.

A stage's code is the import closure of its module `soarlab.stages.<name>` (every `import` in the
module, also inside functions, followed through soarlab), plus the modules its subprocesses run
(`[python, "-m", "soarlab.x"]`, e.g. the transformers engine's launcher), plus the data files those
modules read, listed by hand in DATA_FILES (e.g. `corpus.txt`, the lm-eval task folder; a test keeps
the list complete). Left out on purpose (HARNESS): the code that loads params.yaml, finds the project,
formats errors, writes files atomically, quiets known library warnings, sets the garbage collector's
thresholds and stops a process whose parent died. It decides no output's content, and listing it would
re-run the whole pipeline for a change of an error message.

A folder in deps must be used whole: where a stage uses a few files of a folder, it lists those files,
so that e.g. evaluate does not restart a GPU server when `package/checks.py` changes. Files that params
name (a speed set, a correctness set, calibration text, a local model) are deps by their content, through
the `inputs` stage's digests; a real `dvc repro` checks that editing one re-runs its reader.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import ROOT, SRC, from_import, imported_modules, make_fresh_project, module_file, module_of, module_package

PKG = SRC / "soarlab"
HARNESS = {"soarlab", "soarlab.cli", "soarlab.stages", "soarlab.config", "soarlab.schema", "soarlab.errors",
           "soarlab.paths", "soarlab.atomic", "soarlab.quiet", "soarlab.startup", "soarlab.parent_death",
           "soarlab.known_bad"}  # part of validation (schema.validate), as the SGLang flag checks
STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
# The data files (and folders of them) under src/soarlab each module reads: module -> paths under PKG.
# A .py file in such a folder (the lm-eval task's hooks) is followed as code too.
DATA_FILES = {
    "soarlab.corpus": ["tiny/corpus.txt"],
    "soarlab.datasets.embedded": ["datasets/embedded/correctness.jsonl"],
    "soarlab.accuracy.runner": ["accuracy/lm_eval_tasks"],
    "soarlab.package.image": ["package/Dockerfile", "package/Dockerfile.cpu"],
    "soarlab.stages.package": ["package/prepare_env.sh", "package/prepare_model.sh", "package/container-entrypoint.sh"],
    "soarlab.tiny.build": ["tiny/spec.yaml"],
    "soarlab.tiny.embedded": ["tiny/checkpoint", "tiny/draft"],
}
# The package stage bundles the whole source tree into the submission: it reads every file as data.
WHOLE_TREE = {("package", "src/soarlab")}


def _parents(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__, a/b/__init__ too."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def direct_uses(name: str) -> set[str]:
    """The soarlab modules `name` imports or runs with `-m`, with the parent packages Python runs on the way."""
    tree = ast.parse(module_file(name).read_text())
    package = module_package(name)
    found: set[str] = set()
    # Imports under `if TYPE_CHECKING:` never run; they are for the type checker only.
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base, named = from_import(node, package)
            found |= {base} | named
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found.update(items[i + 1] for i, v in enumerate(items[:-1]) if v == "-m" and isinstance(items[i + 1], str))
    # (a data folder without __init__.py, e.g. tiny/checkpoint/, is no package Python runs)
    return {p for m in found if m.startswith("soarlab") and module_file(m) for p in _parents(m) if module_file(p)}


def files_under(path: Path) -> set[Path]:
    if path.is_file():
        return {path}
    return {p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def data_files(module: str) -> set[Path]:
    return set().union(*(files_under(PKG / rel) for rel in DATA_FILES.get(module, [])))


def closure(root: str) -> set[Path]:
    """Every file under src/ that running module `root` runs or reads (harness left out)."""
    todo, seen, files = [root], set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in HARNESS:  # nor what the harness itself uses (e.g. the stage runner's timing record)
            continue
        data = data_files(name)
        files |= data
        todo += sorted((direct_uses(name) | {module_of(p) for p in data if p.suffix == ".py"}) - seen)
    return {module_file(m) for m in seen - HARNESS} | files


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


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_folder_in_deps_is_used_whole(stage):
    code = stage_code(stage)
    partial = sorted(f"{d.relative_to(ROOT)} ({len(files_under(d) - code)} of {len(files_under(d))} files unused)"
                     for d in declared(stage) if d.is_dir() and (stage, str(d.relative_to(ROOT))) not in WHOLE_TREE
                     and files_under(d) - code)
    assert not partial, f"dvc.yaml stage {stage} lists folders it uses only in part; list the files it uses: {partial}"


def test_data_files_are_listed_and_exist():
    """Every file under src/soarlab that is not Python is some module's data, listed in DATA_FILES."""
    listed = set().union(*(data_files(m) for m in DATA_FILES))
    missing = [f"{m}: {rel}" for m, rels in DATA_FILES.items() for rel in rels if not (PKG / rel).exists()]
    assert not missing, f"DATA_FILES names paths that do not exist: {missing}"
    assert all(module_file(m) for m in DATA_FILES), "DATA_FILES names a module that does not exist"
    unlisted = sorted(str(p.relative_to(ROOT)) for p in files_under(PKG) if p.suffix != ".py" and p not in listed)
    assert not unlisted, f"data files no module is listed as reading (add them to DATA_FILES): {unlisted}"


def test_each_file_a_param_names_is_a_dep_of_its_reader_by_content():
    """The inputs stage digests every file a param names (soarlab.stages.inputs.named_inputs); the stage
    that reads the file lists that digest in deps, and the inputs stage lists the params."""
    from soarlab.config import compose
    from soarlab.stages.inputs import named_inputs

    readers = {"model": "fetch-model", "draft": "fetch-draft", "speed_set": "fetch-data", "correctness_set": "fetch-data", "calibration": "quantize"}
    inputs = named_inputs(compose())
    assert set(inputs) == set(readers), "a new input needs its reader here and a digest dep in dvc.yaml"
    for name, (param, _) in inputs.items():
        assert param in STAGES["inputs"]["params"], f"the inputs stage does not list {param} in params"
        assert f"${{paths.reports}}/inputs/{name}.json" in STAGES[readers[name]]["deps"], (
            f"dvc.yaml stage {readers[name]} reads {param} but does not depend on its digest")


@pytest.mark.slow
def test_editing_a_file_a_param_names_re_runs_its_reader(tmp_path, tiny_model_dir):
    """Real DVC in a fresh copy of the project: `bench.dataset.path` names a speed set; an unchanged file
    re-runs nothing, an edited one (same name, so the params are unchanged) re-runs fetch-data and nothing
    upstream. The base model is the session's tiny model, copied in with model.source=local."""
    proj, env = make_fresh_project(tmp_path / "proj")
    speed = proj / "my_speed.jsonl"
    row = {"question": "one two three four", "model_response": "five six seven"}
    speed.write_text(json.dumps(row) + "\n")

    def run(*cmd: str) -> str:
        done = subprocess.run(cmd, cwd=proj, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(cmd)} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done.stdout

    run("soarlab", "params", "model.source=local", f"model.local_path={tiny_model_dir}", "bench.dataset.path=my_speed.jsonl")
    assert "Running stage 'fetch-data'" in run("dvc", "repro", "fetch-data")
    unchanged = run("dvc", "repro", "fetch-data")
    assert "Running stage 'inputs'" in unchanged and "Running stage 'fetch-data'" not in unchanged

    speed.write_text(json.dumps(row) + "\n" + json.dumps({**row, "question": "eight nine ten"}) + "\n")
    edited = run("dvc", "repro", "fetch-data")
    assert "Running stage 'fetch-data'" in edited and "Running stage 'fetch-model'" not in edited
    assert (proj / "data" / "speed.jsonl").read_text() == speed.read_text()


@pytest.mark.slow
def test_dvc_runs_the_stages_without_an_activated_environment(tmp_path):
    """`.venv/bin/dvc repro` from a shell whose PATH lacks the environment (not activated): each stage finds
    the soarlab beside DVC's interpreter (scripts/stage.sh), where `soarlab stage X` was "command not found".
    Real DVC, under both of its shells: bash (which execs the command) and dash (which waits for it)."""
    proj, env = make_fresh_project(tmp_path / "proj")
    env = {k: v for k, v in env.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"
    assert shutil.which("soarlab", path=env["PATH"]) is None
    dvc = str(Path(sys.executable).parent / "dvc")
    for shell in ("/bin/bash", "/bin/sh"):
        done = subprocess.run([dvc, "repro", "--force", "check-params"], cwd=proj, env={**env, "SHELL": shell},
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{shell}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        assert "Running stage 'check-params'" in done.stdout and (proj / "reports" / "check-params.json").is_file()


def test_every_module_is_some_stage_code_or_a_tool():
    """A module no stage runs is harness, the code of a `soarlab` command (what the handlers in
    soarlab.commands run) or a class Hydra instantiates (a `_target_:` in conf/, e.g. the sweep's callback);
    anything else is dead, or a stage runs it without dvc.yaml knowing."""
    commands = [module_of(p) for p in sorted((PKG / "commands").glob("*.py"))]
    conf = "".join(f.read_text() for f in (ROOT / "conf").rglob("*.yaml"))
    commands += re.findall(r"_target_:\s*(soarlab[\w.]*)\.\w+", conf)
    used = set().union(*(stage_code(s) for s in STAGES), *(closure(m) for m in commands))
    helpers = {PKG / "bench" / "loopback.py",  # the local streaming server of the tests and scripts/
               PKG / "tiny" / "build.py"}  # regenerates the shipped tiny checkpoint: scripts/build_tiny_model.py
    orphans = sorted(
        str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
        if p not in used | helpers and module_of(p) not in HARNESS
    )
    assert not orphans, f"modules that neither a stage nor a command runs: {orphans}"


def all_modules() -> list[str]:
    return sorted(module_of(p) for p in PKG.rglob("*.py"))


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
