"""`soarlab` command line. Each command's parser and handler live in soarlab.commands; its work is
imported only when run, so `soarlab --help` and light commands start without loading torch."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from soarlab import stopping
from soarlab.commands import decide, measure, pipeline, sweep
from soarlab.errors import error_line
from soarlab.names.environment import DEBUG_ENV


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="soarlab", description=__doc__)
    parser.add_argument("--debug", action="store_true", help=f"print the traceback of an error (or {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (pipeline, measure, decide, sweep):  # in the order `soarlab --help` lists them
        group.add_parsers(sub)
    return parser


def tools_on_path() -> None:
    """Put this interpreter's bin folder first on PATH, so that `.venv/bin/soarlab` without an
    activated venv finds the `dvc` installed beside it, and DVC the `soarlab` its stages call."""
    bin_dir = os.path.dirname(sys.executable)
    if os.environ.get("PATH", "").split(os.pathsep)[:1] != [bin_dir]:
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])


def main(argv: list[str] | None = None) -> int:
    from soarlab import quiet, startup

    startup.collect_less_at_import()
    quiet.install()  # known-harmless library warnings (each one's why is there)
    tools_on_path()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sweep"]:  # Hydra parses the rest (its options start with '-', which argparse would take)
        args = argparse.Namespace(run=sweep.sweep_cli, hydra_args=argv[1:], debug=False)
    else:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        # argparse leaves Hydra overrides that follow options after a positional unparsed
        # (`soarlab gate RUN --against best decide.confidence=0.9`): they are overrides all the same.
        if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    stopping.install()
    try:
        return args.run(args) or 0
    except KeyboardInterrupt:
        print("soarlab: interrupted", file=sys.stderr)
        return 130
    except stopping.Terminated as exc:
        print(f"soarlab: stopped by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except Exception as exc:  # noqa: BLE001 - every error ends in one line; the traceback only on request
        if debug:
            traceback.print_exc()
        line, code = error_line(exc)
        print(f"soarlab: error: {line}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
