"""dvc.yaml tells the truth: each stage's deps cover the code the stage runs, and name nothing it does not.

A stage's code is its import closure (soarlab.stage_code, which these tests check against the tree): the
`inputs` stage, which always runs, writes each stage's files and their sha256 to
reports/inputs/code/<stage>.json, and every other stage lists that file in deps, so that editing a module
re-runs exactly the stages that run it (a real `dvc status` after the inputs stage checks it). Files that
params name (a speed set, a correctness set, calibration text, a local model) are deps by their content,
through the `inputs` stage's digests; a real `dvc repro` checks that editing one re-runs its reader.
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

from soarlab.stage_code import CODE_DIR, DATA_FILES, HARNESS, files_under

from support import ROOT, SRC, imported_modules, make_fresh_project, make_project, module_of, source_tree

PKG = SRC / "soarlab"
STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
# The one stage that runs before inputs (dvc.yaml says why) lists its code itself; `package` bundles the
# whole source tree into the submission, so it also reads every file as data.
OWN_CODE = {"check-params": ["src/soarlab/stages/check_params.py"], "package": ["src/soarlab"]}


def code_digest(stage: str) -> str:
    return "/".join(("${paths.reports}", *CODE_DIR, f"{stage}.json"))


@pytest.mark.parametrize("stage", sorted(set(STAGES) - {"inputs"}))
def test_each_stage_lists_its_code_digest_and_no_code_file(stage):
    deps = [str(d) for d in STAGES[stage].get("deps", [])]
    src = [d for d in deps if d.startswith("src/")]
    assert src == OWN_CODE.get(stage, []), f"dvc.yaml stage {stage} lists code files; its code digest covers them: {src}"
    if stage == "check-params":  # so its module alone is its code
        assert source_tree().stage_files(stage) == {PKG / "stages" / "check_params.py"}
    else:
        assert code_digest(stage) in deps, f"dvc.yaml stage {stage} does not list its code digest {code_digest(stage)}"


def test_the_inputs_stage_writes_each_stages_closure(tmp_path):
    """reports/inputs/code/<stage>.json names the files of the stage's closure with their sha256: its own
    module, what it imports (also inside functions, not under TYPE_CHECKING) and the modules its
    subprocesses run with `-m`, the data files they read, and nothing of the harness."""
    import hashlib

    from soarlab.stages.inputs import write_code_digests

    write_code_digests(ROOT, tmp_path)
    records = {p.stem: json.loads(p.read_text()) for p in tmp_path.joinpath(*CODE_DIR).glob("*.json")}
    assert set(records) == set(STAGES) - {"inputs"}
    for stage, record in records.items():
        files = {ROOT / "src" / name: sha for name, sha in record["files"].items()}
        assert record["stage"] == stage and set(files) == source_tree().stage_files(stage)
        assert all(hashlib.sha256(path.read_bytes()).hexdigest() == sha for path, sha in files.items())
    evaluate = set(records["evaluate"]["files"])
    assert {"soarlab/stages/evaluate.py", "soarlab/bench/runner.py",  # imported, some inside functions
            "soarlab/engines/transformers_serve.py",  # run with `python -m` (transformers_engine.build_command)
            "soarlab/package/Dockerfile.cpu", "soarlab/tiny/corpus.txt"} <= evaluate  # data files
    assert not {"soarlab/config.py", "soarlab/errors.py", "soarlab/paths.py"} & evaluate  # the harness
    score = set(records["score"]["files"])  # bench/metrics.py imports bench/client.py for the type checker only
    assert "soarlab/bench/metrics.py" in score and "soarlab/bench/client.py" not in score
    assert "soarlab/quant/quantize.py" not in evaluate and "soarlab/quant/quantize.py" in records["quantize"]["files"]


@pytest.mark.slow
def test_editing_a_module_re_runs_exactly_the_stages_that_run_it(tmp_path):
    """Real DVC on a copy of the project: after the inputs stage, the committed lock is current; an edit
    to the bench runner changes the code digest of evaluate alone, and `dvc status` says evaluate changed."""
    dest, env = make_project(tmp_path / "proj")

    def code_changes() -> dict[str, list[str]]:
        done = subprocess.run(["soarlab", "stage", "inputs"], cwd=dest, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        status = subprocess.run(["dvc", "status", "--json"], cwd=dest, env=env, capture_output=True, text=True, check=True)
        return {stage: [path for entry in entries if isinstance(entry, dict)
                        for path in entry.get("changed deps", {}) if path.startswith("reports/inputs/code/")]
                for stage, entries in json.loads(status.stdout).items()}

    assert not any(code_changes().values()), "dvc.lock is older than the tree's code: run `dvc repro` and commit dvc.lock"
    runner = dest / "src" / "soarlab" / "bench" / "runner.py"
    runner.write_text(runner.read_text() + "\n# an edit\n")
    changed = {stage: paths for stage, paths in code_changes().items() if paths}
    assert changed == {"evaluate": ["reports/inputs/code/evaluate.json"]}, changed


def test_data_files_are_listed_and_exist():
    """Every file under src/soarlab that is not Python is some module's data, listed in DATA_FILES."""
    tree = source_tree()
    listed = set().union(*(tree.data_files(m) for m in DATA_FILES))
    missing = [f"{m}: {rel}" for m, rels in DATA_FILES.items() for rel in rels if not (PKG / rel).exists()]
    assert not missing, f"DATA_FILES names paths that do not exist: {missing}"
    assert all(tree.module_file(m) for m in DATA_FILES), "DATA_FILES names a module that does not exist"
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
    tree = source_tree()
    used = set().union(*(tree.stage_files(s) for s in STAGES), *(tree.closure(m) for m in commands))
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
