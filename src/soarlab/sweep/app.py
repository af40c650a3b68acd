"""`soarlab sweep ARGS`: a Hydra app over conf/ (primary config conf/sweep_app.yaml) whose task
function runs one trial (soarlab.sweep.trial.run_trial). ARGS are Hydra's: overrides with sweep
syntax, `hydra/sweeper=optuna`, `hydra/launcher=ray_gpu` (conf/hydra/launcher/: the launchers
with one GPU per trial), `--cfg job`, `--help`.

Every sweep has a name (`--name NAME`, default: one derived from ARGS). Its folder is
sweeps/NAME, its MLflow parent run carries the name, and running it again resumes it.
"""

from __future__ import annotations

import hashlib
import re
import sys

from soarlab.errors import SoarError
from soarlab.experiments import dvc_cache_dir
from soarlab.names.environment import SWEEP_ENV
from soarlab.paths import project_root

SWEEPS_DIR = "sweeps"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a valid part of a git ref (DVC experiment names)


def split_name(argv: list[str]) -> tuple[str | None, list[str]]:
    """Take `--name NAME` / `--name=NAME` out of the arguments Hydra gets."""
    rest, name, i = [], None, 0
    while i < len(argv):
        if argv[i] == "--name" and i + 1 < len(argv):
            name, i = argv[i + 1], i + 2
            continue
        if argv[i].startswith("--name="):
            name = argv[i].split("=", 1)[1]
        else:
            rest.append(argv[i])
        i += 1
    return name, rest


# Hydra's options that take a value (--info takes one of its choices or none).
_VALUED = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
           "--experimental-rerun"}
_INFO = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def add_overrides(argv: list[str], extra: list[str]) -> list[str]:
    """`extra` placed beside the user's overrides: Hydra takes overrides as one run of positionals."""
    for i, token in enumerate(argv):
        previous = argv[i - 1] if i else ""
        if not token.startswith("-") and previous not in _VALUED and not (previous in ("--info", "-i") and token in _INFO):
            return argv[:i] + extra + argv[i:]
    return argv + extra


def default_name(argv: list[str]) -> str:
    """The same command gets the same name, so running it again resumes it."""
    return "sweep-" + hashlib.sha1(" ".join(sorted(argv)).encode()).hexdigest()[:8]


def check_outputs_cached(root) -> None:
    """Refuse to start when the committed dvc.lock names folder outputs of dvc.yaml's stages that this
    machine's DVC cache lacks (a fresh clone): DVC 3.67 then fails trials whose stages come from its run
    cache ("failed to load directory"), because it still looks them up while it stages the trial's files.
    Entries of stages dvc.yaml no longer has are never run, so they are not asked for."""
    import yaml

    lock, pipeline = root / "dvc.lock", root / "dvc.yaml"
    if not lock.is_file() or not pipeline.is_file():
        return
    cache_dir = dvc_cache_dir(root) / "files" / "md5"
    declared = (yaml.safe_load(pipeline.read_text()) or {}).get("stages", {})
    stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
    # Folder outputs: DVC reads their listings (`.dir` objects) from the cache while it runs a trial.
    missing = [out["path"] for name, stage in stages.items() if name in declared for out in stage.get("outs", [])
               if str(out.get("md5", "")).endswith(".dir")
               and not (cache_dir / out["md5"][:2] / out["md5"][2:]).exists()]
    if missing:
        raise SoarError(f"the outputs dvc.lock names ({', '.join(sorted(set(missing)))}) are not in this "
                        "machine's DVC cache", "run `dvc pull` (from the team's DVC remote) or `dvc repro` first")


# Hydra options that only print (help, config, completion): they run no trial, so nothing is checked first.
_PRINT_ONLY = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc"}


def run_sweep(hydra_args: list[str]) -> int:
    """Hydra's command line (`soarlab sweep ...`, `--name NAME` to name or resume the sweep): a multirun of
    the pipeline under conf/sweep_app.yaml, each trial a DVC experiment."""
    import hydra

    import soarlab.sweep  # noqa: F401  (registers the config resolver the launchers use)
    from soarlab.sweep.trial import run_trial

    name, argv = split_name(list(hydra_args))
    if name is not None and not _NAME.match(name):
        raise SoarError(f"sweep name {name!r} is not usable as a DVC experiment name",
                        "use letters, digits, '-', '_' and '.', starting with a letter or digit")
    name = name or default_name(argv)
    root = project_root()
    if not _PRINT_ONLY & set(argv):
        check_outputs_cached(root)
    if not {"-m", "--multirun", "--run", "-r", *_PRINT_ONLY} & set(argv):
        argv.insert(0, "--multirun")
    argv = add_overrides(argv, [f"hydra.sweep.dir={root / SWEEPS_DIR / name}",
                                f"+hydra.job.env_set.{SWEEP_ENV}={name}"])
    sys.argv = ["soarlab sweep", *argv]
    try:
        hydra.main(config_path=str(root / "conf"), config_name="sweep_app", version_base="1.3")(run_trial)()
    except BaseException:  # Ctrl-C, SIGTERM, an error: the sweep did not finish
        _mark_parent_killed(root, name, argv)
        raise
    return 0


def _mark_parent_killed(root, name: str, argv: list[str]) -> None:
    """An interrupted sweep's MLflow parent run says KILLED, not RUNNING forever; a resume reopens it."""
    import contextlib

    from soarlab.config import compose
    from soarlab.sweep.record import SweepRecord

    with contextlib.suppress(Exception):  # what stopped the sweep is the error to show, not this
        record = SweepRecord(compose([a for a in argv if a.startswith("tracking")], root=root), name)
        parent = record.parent_id()
        if parent and record.client.get_run(parent).info.status == "RUNNING":
            record.client.set_terminated(parent, "KILLED")
