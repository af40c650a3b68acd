"""`soarlab eval-score`: score predictions made elsewhere (e.g. the official eval_model.py) with the CLI."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED
from soarlab.cli import main

def rows():
    return [json.loads(line) for line in EMBEDDED.read_text().splitlines() if line.strip()]


def test_eval_score_prints_one_json_object(conf_project, capsys):
    preds = []
    for i, row in enumerate(rows()):
        if row["task"] == "mcq":
            text = f"<think>ANSWER: A</think>\\boxed{{\\text{{{row['gold']}}}}}" if i % 2 else f"answer : {row['gold'].lower()}"
        elif row["task"] == "cwe":
            text = row["gold"][0]  # 1 of 3 words
        elif row["task"] == "fwe":
            text = " ".join(row["gold"]).upper()
        else:
            text = "</think>" + row["gold"][0]
        # the official script's lines carry more fields than the prediction; they are ignored
        preds.append({"task": row["task"], "gold": row["gold"], "prediction": text, "score": None})
    preds[-1]["prediction"] = ""  # an empty prediction scores 0 (the last row is fwe)
    (conf_project / "pred.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    assert main(["eval-score", "--dataset", str(EMBEDDED), "--predictions", "pred.jsonl"]) == 0
    out = json.loads(capsys.readouterr().out)
    count = Counter(row["task"] for row in rows())
    assert out["per_task"] == pytest.approx(
        {"mcq": 100.0, "qa": 100.0, "niah": 100.0, "lcx": 100.0, "cwe": 100 / 3, "fwe": 100 * (count["fwe"] - 1) / count["fwe"]},
        abs=1e-3,
    )
    n = len(rows())
    expected = 100 * (n - count["cwe"] - count["fwe"] + count["cwe"] / 3 + count["fwe"] - 1) / n
    assert out["ori_accuracy"] == pytest.approx(expected, abs=1e-3)
    assert out["normalized_accuracy"] == 100.0 and out["C"] == 1.0


def test_eval_score_overrides_and_errors(conf_project, capsys):
    (conf_project / "pred.jsonl").write_text("".join(json.dumps({"prediction": "nothing"}) + "\n" for _ in rows()))
    assert main(["eval-score", "--dataset", str(EMBEDDED), "--predictions", "pred.jsonl", "model.baseline_accuracy=50"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ori_accuracy"] == 0.0 and out["C"] == 0.0
    # one prediction short: a clear error, exit code 2
    (conf_project / "short.jsonl").write_text(json.dumps({"prediction": "x"}) + "\n")
    assert main(["eval-score", "--dataset", str(EMBEDDED), "--predictions", "short.jsonl"]) == 2
    assert "1 predictions for" in capsys.readouterr().err
