"""The `soarlab` commands: each module builds the parsers of its commands (`add_parsers`) and holds
their handlers (`*_cli(args)`), which read the parsed arguments, call the package that does the work and
print its result. The work is imported only inside a handler, so `soarlab --help` and light commands
start without loading torch. soarlab.cli assembles the parsers; nothing else imports this package.

- `pipeline.py`: stage, params, doctor, base-image, prepare-model (the pipeline, its config, this machine)
- `measure.py`: score, eval-score, bench, make-speed-set, check-checkpoint (one measurement, outside the pipeline)
- `decide.py`: leaderboard, compare, record-submission, gate (choosing what to submit)
- `sweep.py`: sweep (Hydra's command line, handed over as it is)
"""
