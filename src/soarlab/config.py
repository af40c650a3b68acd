"""Compose the Hydra config under conf/, read the committed params.yaml, flatten for tracking.

The stages read `params.yaml` (what DVC tracks); `dvc exp run -S ...` rewrites it from
`conf/` with Hydra. `compose()` is the same composition, used by the CLI and the tests. Both
check the result against `soarlab.schema`, so a bad value fails before any work starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from soarlab.errors import SoarError
from soarlab.paths import project_root
from soarlab.schema import validate


def compose(overrides: Sequence[str] = (), root: str | Path | None = None) -> DictConfig:
    """Compose conf/config.yaml with Hydra overrides such as `quant=none` or `engine.port=31000`."""
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
    OmegaConf.set_struct(cfg, True)
    validate(cfg, "the composed config")
    return cfg


def compose_official(overrides: Sequence[str] = ()) -> DictConfig:
    """The config for scoring as the platform does: the real model's baseline accuracy (RULES.md 1),
    whatever model the pipeline's default is. Overrides still win."""
    return compose(["model=minicpm_sala", *overrides])


def load_params(path: str | Path = "params.yaml") -> DictConfig:
    """The config a stage runs with, validated against soarlab.schema (`dvc exp run -S` writes it
    without our compose). Unknown keys raise, so a typo in code fails loudly."""
    path = Path(path)
    if not path.is_file():
        raise SoarError(f"{path} not found", "run from the project root, or regenerate it with `soarlab params`")
    cfg = OmegaConf.load(path)
    OmegaConf.set_struct(cfg, True)
    validate(cfg, str(path))
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)


def flatten(cfg: DictConfig | dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists become their JSON-ish repr (MLflow params are strings)."""
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def write_params_cli(args) -> int:
    """`soarlab params`: regenerate params.yaml, the file `dvc repro` reads."""
    from soarlab.atomic import write_text

    write_text(args.output, to_yaml(compose(args.overrides)))  # compose validates (soarlab.schema)
    return 0
