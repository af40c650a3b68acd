"""Compose the Hydra config under conf/, read the committed params.yaml, flatten for tracking.

The stages read `params.yaml` (what DVC tracks); `dvc exp run -S ...` rewrites it from
`conf/` with Hydra. `compose()` is the same composition, used by the CLI and the tests. Both
return the config checked and typed by `soarlab.schema` (a `SoarConfig`), so a bad value fails
before any work starts and the code reads typed fields, never an untyped DictConfig. Where plain
data is needed, `plain()` gives it (digests, YAML); MLflow's params are the config as written
(`composed_data`, `params_data`), so a run shows `0` where the user wrote 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel

from soarlab.errors import SoarError
from soarlab.paths import project_root
from soarlab.schema import SoarConfig, validate


def compose(overrides: Sequence[str] = (), root: str | Path | None = None) -> SoarConfig:
    """Compose conf/config.yaml with Hydra overrides such as `quant=none` or `engine.port=31000`; typed."""
    return validate(hydra_config(overrides, root), "the composed config")


def hydra_config(overrides: Sequence[str] = (), root: str | Path | None = None) -> DictConfig:
    """Hydra's composition itself, as params.yaml holds it (key order and all); not yet checked."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    conf_dir = project_root(root) / "conf"
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        first_line = str(exc).strip().splitlines()[0]
        raise SoarError(
            f"bad config override ({first_line})",
            f"use a key and a group option that exist under {conf_dir} (e.g. quant=none, engine.port=31000)",
        ) from None
    return cfg


def composed_data(overrides: Sequence[str] = (), root: str | Path | None = None) -> dict[str, Any]:
    """Hydra's composition as plain data, values as conf/ and the overrides wrote them (`0`, where the
    typed config holds `0.0`): what params.yaml holds and MLflow's params show."""
    return OmegaConf.to_container(hydra_config(overrides, root), resolve=True)


def params_data(path: str | Path) -> dict[str, Any]:
    """A params file as plain data, values as written (see composed_data)."""
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def compose_official(overrides: Sequence[str] = ()) -> SoarConfig:
    """The config for scoring as the platform does: the real model's baseline accuracy (RULES.md 1),
    whatever model the pipeline's default is. Overrides still win."""
    return compose(["model=minicpm_sala", *overrides])


def load_params(path: str | Path = "params.yaml") -> SoarConfig:
    """The config a stage runs with, validated against soarlab.schema (`dvc exp run -S` writes it
    without our compose). Unknown keys raise, also when code reads one, so a typo fails loudly."""
    path = Path(path)
    if not path.is_file():
        raise SoarError(f"{path} not found", "run from the project root, or regenerate it with `soarlab params`")
    return validate(OmegaConf.load(path), str(path))


def plain(group: BaseModel) -> dict[str, Any]:
    """A typed config (or one of its groups) as plain data: the keys conf/ gave, none of the schema's
    defaults added, so a digest or an MLflow param of it is what the YAML said."""
    return group.model_dump(exclude_unset=True)


def to_yaml(cfg: BaseModel | DictConfig) -> str:
    return OmegaConf.to_yaml(plain(cfg) if isinstance(cfg, BaseModel) else cfg, resolve=True)


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists stay lists (MLflow params take their JSON)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def write_params(overrides: Sequence[str], output: str | Path) -> None:
    """Write the composed config (conf/ plus `overrides`), validated, to `output`: params.yaml, the file
    `dvc repro` reads."""
    from soarlab.atomic import write_text

    cfg = hydra_config(overrides)
    validate(cfg, "the composed config")
    write_text(output, to_yaml(cfg))  # Hydra's own order, which `dvc exp run -S` keeps too
