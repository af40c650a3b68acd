"""SOAR correctness (RULES.md 3): scoring, the lm-eval task and client, the correctness set, bootstrap CI.

- `grading.py`: extraction and scoring of one prediction, summaries, `soarlab eval-score`.
- `lm_eval_tasks/soar_correctness/`: the lm-eval task (YAML plus hooks that call `grading.py`).
- `client.py`: the lm-eval chat model used against the served engine (failed requests count as 0).
- `runner.py`: runs the task (and standard lm-eval tasks) through lm-eval's `evaluate` (runner.evaluate_tasks).
- `answers.py`, `lengths.py`, `after_load.py`: two passes compared answer by answer, the answers' lengths
  against the cap, and the questions asked again after the bench levels (eval.after_load).
The correctness set itself is fetched by soarlab.datasets.correctness (embedded, pinned download, or a file).
"""
