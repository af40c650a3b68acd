"""docs/ARCHITECTURE.md is true where a test can tell: the files it names exist, the names it places in a
module are defined there, and the package imports are the ones its layer table lists.

The doc is read with a few regexes:
- a path: a backticked token with a `/` whose first part is a file or folder of the package (`tracking/store.py`,
  `decide/`), of the module-table row's own folder (`embedded/` in the `datasets/` row), or `src`, `conf`,
  `scripts`, `tests`, `docs`, `soarlab`; a bare backticked `x.py`, `x.sh`, `x.txt`, `x.yaml`;
  and any `src/...`, `conf/...`, `scripts/...`, `tests/...`, `docs/...`, `soarlab/...` in the text. It exists
  under the row's folder, src/soarlab, src/ or the repository root (a bare name also under tests/ or scripts/);
  `bench/tiny` may name a conf/ option.
  Outputs (`reports/...`, `models/...`) and URLs (`/generate`) are no such paths.
- a placement: `soarlab.a.b.name`; "`name` in `x.py`"; `x.py::name`; "`x.py` `Name`"; and the code names
  (`CamelCase`, `UPPER_CASE`, `snake_case`, `f(args)`) in the parenthesis after a backticked `x.py` (up to the
  next path in it) and in the job of a module-table row for one `.py` file. The name is defined in that module
  (def, class, assignment, not an import); in a parenthesis or a row's job it may also be a string its code
  uses (a request field, an environment variable); `soarlab.a.b.name` may also be a string anywhere in src/
  (the MLflow tag `soarlab.machine`).
- the layer table under "Layers point one way": every import of src/ (also inside functions and under
  TYPE_CHECKING) from one package to another is in its row or goes to the base, each row's imports are all
  made, and none goes to a higher layer.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from support import ROOT, SRC, imported_modules, module_of

DOC = ROOT / "docs" / "ARCHITECTURE.md"
PKG = SRC / "soarlab"
ROOTS = ("src", "conf", "scripts", "tests", "docs")
PATH_IN_TEXT = re.compile(r"(?<![\w/.`-])(?:src|conf|scripts|tests|docs|soarlab)/[\w./*-]*[\w/*]")
CODE_NAME = re.compile(r"([A-Za-z_]\w*)(?:\(.*\))?")
EXTENSIONS = (".py", ".sh", ".txt", ".yaml")


def doc_text() -> str:
    return DOC.read_text()


def module_rows(text: str) -> list[tuple[str, str]]:
    """(the module cell's token, the job cell) of each row of the "Modules" table."""
    section = text.split("## Modules (src/soarlab/)", 1)[1].split("\n\n**", 1)[0]
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^\| `([^`]+)` \| (.*) \|$", section, re.M)]


def row_folder(key: str) -> Path:
    return (PKG / key).resolve() if key.endswith("/") else (PKG / key).parent.resolve()


def places(text: str) -> list[tuple[str, Path | None]]:
    """(a piece of the doc, the module-table folder its names are relative to, None outside that table)."""
    rows = [(f"| `{key}` | {job} |", row_folder(key)) for key, job in module_rows(text)]
    lines = {line for line, _ in rows}
    return rows + [("\n".join(line for line in text.splitlines() if line not in lines), None)]


def bases(folder: Path | None) -> list[Path]:
    return ([folder] if folder else []) + [PKG, SRC, ROOT]


def resolve(token: str, folder: Path | None) -> Path | None:
    """The file or folder `token` names, or None."""
    token = token.split("::")[0]
    for base in bases(folder):
        if "*" in token:
            if list(base.glob(token)):
                return base
        elif (base / token).exists():
            return base / token
    if token.split("/")[0] in {p.name for p in (ROOT / "conf").iterdir()}:  # a Hydra option: `bench/tiny`
        if (ROOT / "conf" / token).exists() or (ROOT / "conf" / f"{token}.yaml").exists():
            return ROOT / "conf" / token
    for folder in (ROOT / "tests", ROOT / "scripts"):  # a bare `conftest.py`, `setup.sh`
        if "/" not in token and (folder / token).exists():
            return folder / token
    return None


def is_path_claim(token: str, folder: Path | None) -> bool:
    if not re.fullmatch(r"[\w./*-]+(::\w+)?", token) or token.startswith("/"):  # `/generate`: a URL path
        return False
    if "/" in token.strip("/") or token.endswith("/"):
        first = token.split("/")[0]
        return first in (*ROOTS, "..", "soarlab") or any((b / first).exists()
                                                           for b in [PKG, *([folder] if folder else [])])
    return token.endswith(EXTENSIONS) and not token.startswith(".")


def path_claims(text: str) -> list[tuple[str, Path | None]]:
    claims = []
    for piece, folder in places(text):
        claims += [(t, folder) for t in re.findall(r"`([^`\s]+)`", piece) if is_path_claim(t, folder)]
        claims += [(t, None) for t in PATH_IN_TEXT.findall(piece)]
    return claims


def test_every_path_the_doc_names_exists():
    claims = path_claims(doc_text())
    assert len(claims) > 100  # the regexes still find the doc's paths
    missing = sorted({t for t, folder in claims if resolve(t, folder) is None})
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


# --- names placed in modules ---------------------------------------------------------------------------

def module_path(path: Path) -> Path | None:
    """The .py file a resolved path names (a package: its __init__.py)."""
    if path.is_dir():
        path = path / "__init__.py"
    return path if path.suffix == ".py" and path.is_file() else None


@cache
def defined(path: Path) -> frozenset[str]:
    """Top-level names a module defines: def, class, assignment (not imports)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return frozenset(names)


@cache
def strings(path: Path) -> frozenset[str]:
    """The string constants a module's code uses, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return frozenset(n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings)


def all_strings() -> set[str]:
    return set().union(*(strings(p) for p in SRC.rglob("*.py")))


def code_names(fragment: str) -> list[str]:
    """The backticked tokens of `fragment` that look like code names: CamelCase, UPPER_CASE, snake_case, f(args)."""
    names = []
    for token in re.findall(r"`([^`]+)`", fragment):
        m = CODE_NAME.fullmatch(token)
        if m and ("_" in m.group(1) or any(c.isupper() for c in m.group(1))) and not m.group(1).startswith("_"):
            names.append(m.group(1))
    return names


def parenthesis_after(text: str, start: int) -> str | None:
    if not text.startswith(" (", start):
        return None
    depth = 0
    for i in range(start + 1, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 2:i]
    return None


def placements(text: str) -> list[tuple[str, str, Path | None, bool]]:
    """(name, file token, module-table folder, whether a string of the module's code counts)."""
    found = []
    for piece, folder in places(text):
        found += [(n, f, folder, False) for n, f in re.findall(r"`(\w+)` in `([\w/]+\.py)`", piece)]
        found += [(n, f, folder, False) for f, n in re.findall(r"`([\w/]+\.py)::(\w+)`", piece)]
        found += [(n, f, folder, False) for f, n in re.findall(r"`([\w/]+\.py)` `(\w+)`", piece)]
        for m in re.finditer(r"`([\w/.]+\.py)`", piece):
            inside = parenthesis_after(piece, m.end())
            if inside is not None:
                # up to the next path in it (not a URL's `/generate`): the names after it are that file's
                inside = re.split(r"`[^`\s/][^`\s]*(?:/|\.(?:py|sh|txt|yaml|json|jsonl|md)`)", inside)[0]
                found += [(n, m.group(1), folder, True) for n in code_names(inside)]
    for key, job in module_rows(text):
        if key.endswith(".py"):
            found += [(n, key.rsplit("/", 1)[-1], row_folder(key), True) for n in code_names(job)]
    return found


def test_every_name_the_doc_places_in_a_module_is_there():
    text = doc_text()
    found = placements(text)
    assert len(found) > 30  # the regexes still find the doc's placements
    wrong = []
    for name, token, folder, string_ok in found:
        path = resolve(token, folder)
        module = module_path(path) if path else None
        if module is None:
            wrong.append(f"{name} in {token} (no such module)")
        elif name not in defined(module) and not (string_ok and name in strings(module)):
            wrong.append(f"{name} in {token}")
    assert not wrong, f"docs/ARCHITECTURE.md places names where they are not defined: {wrong}"


def test_every_dotted_soarlab_name_resolves():
    dotted = set(re.findall(r"(?<![\w/.-])soarlab(?:\.\w+)+", doc_text()))
    assert len(dotted) > 5
    tags, wrong = all_strings(), []
    for ref in sorted(dotted):
        parts = ref.split(".")
        for i in range(len(parts), 0, -1):  # the longest module prefix, then at most one name defined in it
            candidate = SRC.joinpath(*parts[:i])
            module = module_path(candidate.with_suffix(".py")) or module_path(candidate)
            if module:
                break
        rest = parts[i:]
        if ref not in tags and (len(rest) > 1 or (rest and rest[0] not in defined(module))):  # a tag: soarlab.machine
            wrong.append(ref)
    assert not wrong, f"docs/ARCHITECTURE.md names soarlab.* that do not resolve: {wrong}"


# --- the layer table ---------------------------------------------------------------------------------

def layer_table(text: str) -> tuple[dict[str, int], dict[str, set[str]], set[str]]:
    """(package -> layer, 0 the top; package -> the packages its row lists; the base)."""
    section = text.split("**Layers point one way.**", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\w+) \| (.+?) \| (.+?) \|$", section, re.M)
    assert rows, "the layer table is gone from docs/ARCHITECTURE.md"
    order: list[str] = []
    layer, imports, base = {}, {}, set()
    for name, packages, listed in rows:
        if name == "layer":
            continue
        if name not in order:
            order.append(name)
        packages = re.findall(r"`(\w+)`", packages.split(" (")[0])
        for package in packages:
            assert package not in layer, f"{package} has two rows"
            layer[package] = order.index(name)
            imports[package] = set(re.findall(r"`(\w+)`", listed))
        if name == "base":
            base |= set(packages)
    assert order[-1] == "base", "the base is the last layer"
    return layer, imports, base


def package_of(module: str) -> str | None:
    """`soarlab.tracking.store` -> tracking, `soarlab.domain` -> domain, `hydra_plugins.x` -> hydra_plugins;
    None for the `soarlab` package itself (every import of it runs it)."""
    parts = module.split(".")
    if parts[0] != "soarlab":
        return parts[0]
    return parts[1] if len(parts) > 1 else None


def package_imports() -> dict[str, dict[str, list[str]]]:
    """package -> package it imports -> the modules that do, from every import in src/ (also inside functions
    and under TYPE_CHECKING), read as tests/repo/test_dvc_graph.py reads them."""
    found: dict[str, dict[str, list[str]]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = module_of(path)
        for target in imported_modules(module):
            source, used = package_of(module), package_of(target)
            if source and used and used != source:  # (soarlab/__init__.py is no package's)
                found.setdefault(source, {}).setdefault(used, []).append(module)
    return found


def test_the_package_imports_are_the_layer_table():
    layer, listed, base = layer_table(doc_text())
    packages = {package_of(module_of(p)) for p in SRC.rglob("*.py")} - {None}
    assert not packages - set(layer), f"packages the layer table lacks: {sorted(packages - set(layer))}"
    assert not set(layer) - packages, f"the layer table names no such packages: {sorted(set(layer) - packages)}"
    upward = [f"{p} -> {q}" for p, qs in listed.items() for q in qs if q not in layer or layer[q] < layer[p]]
    assert not upward, f"the layer table lets a package import a higher layer (or no package): {upward}"
    actual = package_imports()
    unlisted = [f"{p} -> {q} ({where[0]})" for p, used in actual.items() for q, where in used.items()
                if q not in listed[p] | base]
    assert not unlisted, f"imports the layer table in docs/ARCHITECTURE.md does not allow: {unlisted}"
    unused = [f"{p} -> {q}" for p, qs in listed.items() for q in qs if q not in actual.get(p, {})]
    assert not unused, f"imports the layer table lists that no module makes: {unused}"
