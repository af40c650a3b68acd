"""The code each pipeline stage runs, for the `inputs` stage's code digests (reports/inputs/code/<stage>.json).

A stage's code is the import closure of its module `soarlab.stages.<name>`: every `import` in the module,
also inside functions (not those under `if TYPE_CHECKING:`, which never run), followed through soarlab,
plus the modules its subprocesses run (`[python, "-m", "soarlab.x"]`, e.g. the transformers engine's
launcher), plus the data files those modules read (DATA_FILES; a test keeps it complete). Left out
(HARNESS): the code that loads params.yaml, finds the project, formats errors, writes files atomically,
quiets known library warnings, sets the garbage collector's thresholds and stops a process whose parent
died. It decides no output's content, and counting it would re-run the whole pipeline for a change of an
error message.

A stage lists its digest file in dvc.yaml instead of its code files, so that dvc.yaml names no code file
(a new import needs no edit there) and dvc.lock holds one entry for each stage's code; the digest file still
names each file and its sha256, so a changed file re-runs exactly the stages that run it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from soarlab.datasets.soar import file_sha256

HARNESS = frozenset({"soarlab", "soarlab.cli", "soarlab.stages", "soarlab.config", "soarlab.schema", "soarlab.errors",
                     "soarlab.paths", "soarlab.atomic", "soarlab.quiet", "soarlab.startup", "soarlab.parent_death",
                     "soarlab.known_bad"})  # known_bad: part of validation (schema.validate), as the SGLang flag checks
# The data files (and folders of them) under src/soarlab each module reads: module -> paths under the
# package. A .py file in such a folder (the lm-eval task's hooks) is followed as code too.
DATA_FILES = {
    "soarlab.corpus": ["tiny/corpus.txt"],
    "soarlab.datasets.embedded": ["datasets/embedded/correctness.jsonl"],
    "soarlab.accuracy.runner": ["accuracy/lm_eval_tasks"],
    "soarlab.package.image": ["package/Dockerfile", "package/Dockerfile.cpu"],
    "soarlab.stages.package": ["package/prepare_env.sh", "package/prepare_model.sh", "package/container-entrypoint.sh"],
    "soarlab.tiny.build": ["tiny/spec.yaml"],
    "soarlab.tiny.embedded": ["tiny/checkpoint", "tiny/draft"],
}
CODE_DIR = ("inputs", "code")  # under paths.reports: one <stage>.json per stage of dvc.yaml


class SourceTree:
    """The modules of the soarlab package under `src` (a project's src/ folder), read by their file names."""

    def __init__(self, src: Path):
        self.src = Path(src)
        # per module and per file: the stages' closures overlap
        self._uses: dict[str, set[str]] = {}
        self._sha256: dict[Path, str] = {}

    def module_file(self, name: str) -> Path | None:
        path = self.src.joinpath(*name.split("."))
        for candidate in (path / "__init__.py", path.with_suffix(".py")):
            if candidate.is_file():
                return candidate
        return None

    def module_of(self, path: Path) -> str:
        return ".".join(path.relative_to(self.src).with_suffix("").parts).removesuffix(".__init__")

    def module_package(self, name: str) -> str:
        """The package module `name`'s relative imports start from (itself, for a package)."""
        return name if self.module_file(name).name == "__init__.py" else name.rpartition(".")[0]

    def from_import(self, node: ast.ImportFrom, package: str) -> tuple[str, set[str]]:
        """(the module a `from ... import` names, relative ones resolved; the submodules among its names)."""
        base = node.module or ""
        if node.level:
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
        return base, {f"{base}.{a.name}" for a in node.names if self.module_file(f"{base}.{a.name}")}

    def direct_uses(self, name: str) -> set[str]:
        """The soarlab modules `name` imports or runs with `-m`, with the parent packages Python runs on the way."""
        if name not in self._uses:
            self._uses[name] = self._read_uses(name)
        return self._uses[name]

    def _read_uses(self, name: str) -> set[str]:
        package = self.module_package(name)
        text = self.module_file(name).read_text()
        tree = ast.parse(text)
        found: set[str] = set()
        for node in _statements(tree.body):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base, named = self.from_import(node, package)
                found |= {base} | named
        if '"-m"' in text or "'-m'" in text:  # a subprocess's command line: [..., "-m", "soarlab.x", ...]
            for node in ast.walk(tree):
                if isinstance(node, (ast.List, ast.Tuple)):
                    items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                    found.update(items[i + 1] for i, v in enumerate(items[:-1]) if v == "-m" and isinstance(items[i + 1], str))
        # (a data folder without __init__.py, e.g. tiny/checkpoint/, is no package Python runs)
        return {p for m in found if m.startswith("soarlab") and self.module_file(m) for p in _parents(m) if self.module_file(p)}

    def data_files(self, module: str) -> set[Path]:
        package = self.src / "soarlab"
        return set().union(*(files_under(package / rel) for rel in DATA_FILES.get(module, [])))

    def closure(self, root: str) -> set[Path]:
        """Every file under src/ that running module `root` runs or reads (the harness left out)."""
        todo, seen, files = [root], set(), set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in HARNESS:  # nor what the harness itself uses (e.g. the stage runner's timing record)
                continue
            data = self.data_files(name)
            files |= data
            todo += sorted((self.direct_uses(name) | {self.module_of(p) for p in data if p.suffix == ".py"}) - seen)
        return {self.module_file(m) for m in seen - HARNESS} | files

    def stage_files(self, stage: str) -> set[Path]:
        """The code and data files dvc.yaml stage `stage` runs or reads."""
        return self.closure(f"soarlab.stages.{stage.replace('-', '_')}")

    def code_record(self, stage: str) -> dict:
        """{"stage": stage, "files": {path under src/: sha256}}: what the stage's code digest file holds."""
        return {"stage": stage, "files": {p.relative_to(self.src).as_posix(): self.sha256(p) for p in sorted(self.stage_files(stage))}}

    def sha256(self, path: Path) -> str:
        # hashed anew in each process (a few MB in all): DVC's temp copies of the project would fill
        # soarlab.digest's cache, which remembers files by identity
        if path not in self._sha256:
            self._sha256[path] = file_sha256(path)
        return self._sha256[path]


def files_under(path: Path) -> set[Path]:
    if path.is_file():
        return {path}
    return {p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _parents(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__, a/b/__init__ too."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _statements(body: list[ast.stmt]):
    """Every statement in `body` and in the blocks nested in it (functions, classes, if, try, with, loops,
    match), but not what runs under `if TYPE_CHECKING:`, which is for the type checker only."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo += node.orelse
            continue
        yield node
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            todo += getattr(node, block, None) or []


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
