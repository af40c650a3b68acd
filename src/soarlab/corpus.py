"""The corpus: about 150 KB of real English prose, the start of CPython 3.11's pydoc topics (the language
reference), under the PSF License. The text of generated speed sets, of calibration data and of the tiny
tokenizer. A module of its own, so that only the stages that read it list it in their deps (dvc.yaml)."""

from __future__ import annotations

from pathlib import Path

CORPUS_PATH = Path(__file__).resolve().parent / "tiny" / "corpus.txt"
