"""No module reads a config key the schema does not declare.

The code reads the typed config (`soarlab.config.compose` and `load_params` return a
soarlab.schema.SoarConfig): its models forbid extra keys, so at run time reading or setting an
unknown attribute raises (the last test). A test of the default config only runs the reads its
branches reach, so the rest is checked statically here: every chain read off the config in
src/soarlab (`cfg.a.b`, `cfg.a["b"]`, `cfg.a.get("b")`), off the sub-configs passed by their usual
names (`qcfg` is `quant`, `eval_cfg` is `eval`, ...) and off local names bound to such a chain
(`ref = cfg.score.reference`), is resolved against SoarConfig: an attribute must be a field of the
model it is read from (for the engine union: of some engine) or a pydantic method (`model_dump`);
`["b"]` and `.get("b")` are only for the schema's dict fields (a model has neither: the engine
union is told apart by type, not probed with `.get`). The sweep's `trial.*` and `sweep.*` (conf/sweep_app.yaml)
resolve against soarlab.schema.SweepTrial and SweepPruning; `hydra.*` is Hydra's own and skipped.
"""

from __future__ import annotations

import ast
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from support import ROOT
from soarlab.config import compose
from soarlab.errors import SoarError
from soarlab.schema import SoarConfig, SweepPruning, SweepTrial, validate_sweep, validate_trial

PKG = ROOT / "src" / "soarlab"
# Names the code gives the config and its groups (parameters and locals), and where each points.
ROOTS = {"cfg": (), "qcfg": ("quant",), "eval_cfg": ("eval",), "bench_cfg": ("bench",), "score_cfg": ("score",),
         "model_cfg": ("model",), "bootstrap_cfg": ("eval", "bootstrap")}
AMBIGUOUS = {"dataset_cfg": [("bench", "dataset"), ("eval", "dataset")]}  # either data set's group
HYDRA_KEYS = {"hydra"}
DICT_METHODS = {"get", "items", "keys", "values", "pop", "copy"}
METHODS = DICT_METHODS | {name for name in dir(BaseModel) if name.startswith("model_")}


def _item(key: str) -> str | None:
    """'x' of a `["x"]` or `.get("x")` read (how `_chain` writes them); None for an attribute."""
    return key[1:-1] if key.startswith("[") else key[4:-1] if key.startswith("get(") else None


def _unwrap(tp) -> list:
    """The concrete types an annotation allows (Annotated, Optional and unions opened)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(tp) for t in _unwrap(arg) if t is not type(None)]
    return [tp]


def resolves(tp, keys: list[str]) -> bool:
    if not keys:
        return True
    for option in _unwrap(tp):
        if isinstance(option, type) and issubclass(option, BaseModel):
            if keys[0] in METHODS - DICT_METHODS:
                return True  # a pydantic method (model_dump, model_copy)
            field = option.model_fields.get(keys[0])  # an item read (`["x"]`, `.get("x")`) is no field
            if field is not None and resolves(field.annotation, keys[1:]):
                return True
        elif typing.get_origin(option) is dict:
            item = _item(keys[0])
            if (item is not None and resolves(typing.get_args(option)[1], keys[1:])) or keys[0] in DICT_METHODS:
                return True
        else:
            return True  # a value (or a list): what follows are its own methods
    return False


def _chain(node) -> tuple[str | None, list[str]]:
    """(root name, keys) of `a.b["c"].get("d")`."""
    keys: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            keys.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            keys.append(f"[{node.slice.value}]")
            node = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            keys.append(f"get({node.args[0].value})")
            node = node.func.value
        else:
            break
    return (node.id if isinstance(node, ast.Name) else None), keys[::-1]


def reads(path: Path) -> list[tuple[int, list[str]]]:
    """(line, full key path) of each config read in a module."""
    tree = ast.parse(path.read_text())
    roots = {name: [prefix] for name, prefix in ROOTS.items()} | {n: list(p) for n, p in AMBIGUOUS.items()}
    for node in ast.walk(tree):  # local names bound to a config chain: `ref = cfg.score.reference`
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            root, keys = _chain(node.value)
            if root in ROOTS and keys and keys[-1] not in METHODS:
                roots.setdefault(node.targets[0].id, [ROOTS[root] + tuple(keys)])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            root, keys = _chain(node)
            if root in roots and keys:
                found += [(node.lineno, list(prefix) + keys) for prefix in roots[root]]
    return found


def test_the_scan_finds_a_misspelt_key_through_every_form_of_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f(cfg, qcfg):\n"
        "    ref = cfg.score.reference\n"
        "    return (cfg.engine.get('python_path'), ref.durationz, qcfg.calibration['seed'], cfg.engine.port,\n"
        "            ref.durations, ref.durations['S1'], cfg.bench.levels.get('S1'), cfg.quant.model_dump())\n")
    bad = sorted({".".join(keys) for _, keys in reads(module) if not resolves(SoarConfig, keys)})
    # A misspelt key, and an item read off a model (a dict field's `["S1"]` and `.get("S1")` are fine).
    assert bad == ["engine.get", "engine.get(python_path)", "quant.calibration.[seed]", "score.reference.durationz"]
    assert len(reads(PKG / "tracking" / "durations.py")) > 5, "the scan no longer sees the package's reads"


def test_no_module_reads_a_key_outside_the_schema():
    unknown = []
    for path in sorted(PKG.rglob("*.py")):
        by_root = {}
        for line, keys in reads(path):
            sweep_app = {"trial": SweepTrial, "sweep": SweepPruning}.get(keys[0])
            if keys[0] in HYDRA_KEYS or resolves(SoarConfig, keys) or (sweep_app and resolves(sweep_app, keys[1:])):
                continue
            by_root.setdefault(tuple(keys), line)
        unknown += [f"{path.relative_to(ROOT)}:{line}: {'.'.join(k)}" for k, line in by_root.items()]
    # A dataset_cfg read is fine when either data set's group has the key.
    unknown = [u for u in unknown if not _fits_another_dataset(u)]
    assert not unknown, f"config keys read but not in soarlab.schema: {unknown}"


def _fits_another_dataset(item: str) -> bool:
    keys = item.rsplit(": ", 1)[1].split(".")
    if keys[1:2] != ["dataset"]:
        return False
    other = "eval" if keys[0] == "bench" else "bench"
    return resolves(SoarConfig, [other, *keys[1:]])


def test_the_sweeps_trial_keys_are_typed():
    trial = yaml.safe_load((ROOT / "conf" / "sweep_app.yaml").read_text())["trial"]
    assert validate_trial(trial).always == ["engine.port=0"]
    with pytest.raises(SoarError, match=r"trial\.timeout_s .*greater than 0"):
        validate_trial({**trial, "timeout_s": -1})
    with pytest.raises(SoarError, match=r"trial\.retries .*unknown key"):
        validate_trial({**trial, "retries": 2})


def test_the_sweeps_pruning_keys_are_typed():
    pruning = yaml.safe_load((ROOT / "conf" / "sweep_app.yaml").read_text())["sweep"]
    assert validate_sweep(pruning).prune is False
    with pytest.raises(SoarError, match=r"sweep\.s1_fraction .*less than 1"):
        validate_sweep({**pruning, "s1_fraction": 2})


def test_the_typed_config_refuses_an_unknown_key_at_run_time():
    """What the static scan cannot follow (a config passed under another name) still fails loudly."""
    cfg = compose(root=ROOT)
    with pytest.raises(AttributeError, match="prot"):
        cfg.engine.prot  # noqa: B018 - the read is the test
    with pytest.raises(ValueError, match="prot"):
        cfg.engine.prot = 31000
    with pytest.raises(AttributeError, match="get"):
        cfg.engine.get("port")  # the engine union is told apart by type (isinstance), not probed
