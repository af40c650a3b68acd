#!/usr/bin/env python
"""Regenerate the embedded tiny checkpoint (src/soarlab/tiny/checkpoint/) from src/soarlab/tiny/spec.yaml.

    python scripts/build_tiny_model.py            # train (about 4 minutes on 2 cores) and write the checkpoint
    python scripts/build_tiny_model.py --rehash   # only rewrite SHA256SUMS (after editing the remote code)
    python scripts/build_tiny_model.py --draft    # distil the speculative-decoding draft (src/soarlab/tiny/draft/)
                                                  # from the shipped checkpoint: run it after every rebuild

The pipeline never trains: fetch-model installs these bytes, so every machine gets the same model. A
rebuild on another CPU gives other weights (float32 training depends on the instruction set), so after
one, measure the README's accuracy table and model.baseline_accuracy again and commit all three.
"""

from __future__ import annotations

import argparse

from soarlab.atomic import scratch_dir
from soarlab.datasets.embedded import read_embedded_correctness
from soarlab.tiny.build import build_tiny_draft, build_tiny_model, load_spec
from soarlab.tiny.embedded import CHECKPOINT_DIR, DRAFT_DIR, write_manifest


def _replace(folder, built) -> None:
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for new in built.iterdir():
        new.replace(folder / new.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rehash", action="store_true", help="only rewrite SHA256SUMS for the files as they are")
    parser.add_argument("--draft", action="store_true", help="build the draft from the shipped checkpoint instead")
    args = parser.parse_args()
    folder = DRAFT_DIR if args.draft else CHECKPOINT_DIR
    if not args.rehash:
        spec = load_spec()
        with scratch_dir(folder.parent, f"{folder.name}-build") as tmp:
            if args.draft:
                built = build_tiny_draft(tmp / folder.name, CHECKPOINT_DIR, spec.draft, read_embedded_correctness())
            else:
                built = build_tiny_model(tmp / folder.name, spec, read_embedded_correctness())
            _replace(folder, built)
    print(f"wrote {write_manifest(folder)}")


if __name__ == "__main__":
    main()
