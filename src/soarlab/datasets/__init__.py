"""SOAR-format datasets: JSONL readers with line-numbered errors (`soar.py`) and speed-set making (`speed.py`)."""
