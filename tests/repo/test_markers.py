"""`pytest -m "not slow"` is the quick loop between edits (docs/ARCHITECTURE.md): it must leave out every
test that starts a pipeline, a sweep, a container or GPTQ. Checked on what pytest really collects: each
test's source and, recursively, the source of every fixture it takes and every function it calls, from its
module, conftest.py and the helper modules of tests/ it imports (support.py, decide/compare_rerun_lab.py)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from support import ROOT

TESTS = ROOT / "tests"

HEAVY = {
    "a pipeline": re.compile(r'"dvc",[^\]\n]*"(repro|exp)"|run\("dvc", "(repro|exp)"|"exp", "run"'),
    "a sweep": re.compile(r'"sweep", (?!"--help")|sweep_cli\('),
    "a container": re.compile(r"ensure_podman\(|container_tool\(|\"podman\", \"(run|build)\""),
    "GPTQ": re.compile(r"quantize_checkpoint\(|\"stage\", \"quantize\"|\"prepare-model\"[^\n]*quant=(gptq|rtn)"),
}

# Tests whose heavy-looking call is refused before any work starts (what they test), so they stay quick.
REFUSED_BEFORE_WORK = {"test_corrupt_model_prepare_model_and_check_checkpoint"}  # prepare-model on a corrupt model


@lru_cache(maxsize=None)
def functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


@lru_cache(maxsize=None)
def helpers(path: Path) -> tuple[Path, ...]:
    """conftest.py (its fixtures need no import) and the modules of tests/ that `path` imports from (`support`,
    `decide.compare_rerun_lab`: tests/ is on the path)."""
    tree = ast.parse(path.read_text())
    names = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    found = [TESTS / f"{name.replace('.', '/')}.py" for name in sorted(names)]
    return (TESTS / "conftest.py", *(f for f in found if f.is_file() and f.name != "conftest.py"))


def sources(path: Path, name: str, seen: set) -> list[str]:
    """The source of test or fixture `name`, of the fixtures it takes and of the functions it calls, recursively."""
    for where in (path, *helpers(path)):
        node = functions(where).get(name)
        if node is not None and (where, name) not in seen:
            seen.add((where, name))
            found = [ast.get_source_segment(where.read_text(), node)]
            called = [c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]
            for other in [arg.arg for arg in node.args.args] + called:  # as the test's module and `where` see them
                found += sources(path, other, seen) + sources(where, other, seen)
            return found
    return []


def test_quick_loop_leaves_out_pipelines_sweeps_containers_and_gptq():
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(ids) > 50, proc.stdout[-2000:]
    offenders = []
    for node_id in ids:
        file, name = node_id.split("::")[0], node_id.split("::")[-1].split("[")[0]
        if name in REFUSED_BEFORE_WORK:
            continue
        text = "\n".join(sources(ROOT / file, name, set()))
        offenders += [f"{node_id} starts {what}" for what, pattern in HEAVY.items() if pattern.search(text)]
    assert not offenders, "mark these @pytest.mark.slow (and e2e/container): " + "; ".join(offenders)
