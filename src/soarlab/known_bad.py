"""SGLang flag combinations known to fail on MiniCPM-SALA (engine.known_bad of conf/engine/sglang.yaml),
checked at validation in the flags a local SGLang launch gets (engine.server_args) and in those the submission
carries (package.sglang.server_args): a recorded fact refuses the config in one line citing its source; a
second-hand one (`secondhand: true`) is a warning naming its source, said once per process.
"""

from __future__ import annotations

import json
import sys

from soarlab.errors import SoarError

_said: set[str] = set()


def matches(rule, args: dict) -> bool:
    return (all(args.get(flag) in values for flag, values in rule.when.items())
            and not any(args.get(flag) == value for flag, value in rule.unless.items()))


def _describe(rule, args: dict) -> str:
    return " with ".join(f"{flag}={'(unset)' if args.get(flag) is None else args[flag]}" for flag in rule.when)


def check(cfg) -> None:
    """Refuse the first recorded known-bad combination found; warn of second-hand ones."""
    targets = [("package.sglang.server_args", cfg.package.sglang.server_args)]
    if cfg.engine.name == "sglang":
        targets.insert(0, ("engine.server_args", cfg.engine.server_args))
    for where, args in targets:
        for rule in cfg.package.sglang.known_bad:
            if not matches(rule, args):
                continue
            problem = f"{where} {_describe(rule, args)}: {rule.why} ({rule.source})"
            if rule.secondhand:
                if problem not in _said:
                    _said.add(problem)
                    print(f"soarlab: warning: {problem}, second-hand", file=sys.stderr)
                continue
            safe = ", or ".join(f"{flag}={json.dumps(value)}" for flag, value in rule.unless.items())
            raise SoarError(problem, f"{f'set {safe} or ' if safe else ''}change {next(iter(rule.when))}")
