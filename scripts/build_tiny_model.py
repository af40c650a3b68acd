#!/usr/bin/env python
"""Regenerate the embedded tiny checkpoint (src/soarlab/tiny/checkpoint/) from src/soarlab/tiny/spec.yaml.

    python scripts/build_tiny_model.py            # train (about 4 minutes on 2 cores) and write the checkpoint
    python scripts/build_tiny_model.py --rehash   # only rewrite SHA256SUMS (after editing the remote code)

The pipeline never trains: fetch-model installs these bytes, so every machine gets the same model. A
rebuild on another CPU gives other weights (float32 training depends on the instruction set), so after
one, measure the README's accuracy table and model.baseline_accuracy again and commit all three.
"""

from __future__ import annotations

import argparse

from soarlab.atomic import scratch_dir
from soarlab.datasets.embedded import read_embedded_correctness
from soarlab.tiny.build import build_tiny_model, load_spec
from soarlab.tiny.embedded import CHECKPOINT_DIR, write_manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rehash", action="store_true", help="only rewrite SHA256SUMS for the files as they are")
    args = parser.parse_args()
    if not args.rehash:
        with scratch_dir(CHECKPOINT_DIR.parent, "checkpoint-build") as tmp:
            built = build_tiny_model(tmp / "checkpoint", load_spec(), read_embedded_correctness())
            for old in CHECKPOINT_DIR.iterdir():
                old.unlink()
            for new in built.iterdir():
                new.replace(CHECKPOINT_DIR / new.name)
    print(f"wrote {write_manifest(CHECKPOINT_DIR)}")


if __name__ == "__main__":
    main()
