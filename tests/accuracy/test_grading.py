"""RULES.md 3 scoring: every task type and every mcq answer format, awkward cases included."""

from __future__ import annotations

import json

import pytest

from soarlab.accuracy.grading import (
    answer_part,
    bootstrap_ci,
    extract_mcq,
    read_predictions,
    score_prediction,
    score_rows,
    summarize,
)
from support import ROOT
from soarlab.config import compose
from soarlab.datasets.correctness import check_gold, read_correctness_set
from soarlab.errors import SoarError
from soarlab.schema import Bootstrap, CBand

# The score group as the schema types it, with a table whose bands the tests below cross.
SCORE_CFG = compose(root=ROOT).score.model_copy(update={
    "accuracy_cap": 100.0,
    "c_table": [CBand(above=99.0, C=1.0), CBand(above=98.0, C=0.96), CBand(above=97.0, C=0.92)],
    "c_floor": 0.0,
})


@pytest.mark.parametrize(
    "text, letter",
    [
        ("ANSWER: B", "B"),
        ("answer: b", "B"),  # lower case keyword and letter
        ("Answer : c", "C"),  # spaces around the colon
        ("AnSwEr:D", "D"),  # mixed case, no space
        ("so the result is \\boxed{\\text{A}}", "A"),
        ("\\BOXED{\\TEXT{ c }}", "C"),  # mixed-case keywords inside the box
        ("\\boxed{D}", "D"),
        ("\\boxed{b}", "B"),
        ("ANSWER: C and later \\boxed{A}", "C"),  # ANSWER wins over a box
        ("\\boxed{\\text{B}} then \\boxed{C}", "B"),  # \text box before plain box
        ("ANSWER: E", None),  # not A-D
        ("I think it is B", None),
        ("", None),
    ],
)
def test_mcq_formats(text, letter):
    assert extract_mcq(text) == letter
    assert score_prediction("mcq", "B", text)[0] == (1.0 if letter == "B" else 0.0)


def test_only_text_after_the_last_think_counts():
    pred = "<think>ANSWER: A</think> second thought ANSWER: C </think>\nANSWER: b"
    assert answer_part(pred) == "\nANSWER: b"
    assert score_prediction("mcq", "B", pred) == (1.0, "B")
    # an answer only inside the thinking does not count
    assert score_prediction("mcq", "A", "<think>ANSWER: A</think>no idea")[0] == 0.0
    # the marker itself is matched case-insensitively; no marker: all text counts
    assert answer_part("x</THINK>y") == "y"
    assert score_prediction("qa", ["paris"], "Paris")[0] == 1.0


@pytest.mark.parametrize("task", ["qa", "niah", "lcx"])
def test_any_of_tasks(task):
    gold = ["Martha Reyes", "Reyes"]
    assert score_prediction(task, gold, "It was reyes.")[0] == 1.0
    assert score_prediction(task, gold, "<think>Martha Reyes</think>someone else")[0] == 0.0
    assert score_prediction(task, gold, "")[0] == 0.0


@pytest.mark.parametrize("task", ["cwe", "fwe"])
def test_coverage_tasks(task):
    gold = ["apple", "river", "stone", "lamp"]
    assert score_prediction(task, gold, "APPLE, River")[0] == 0.5
    assert score_prediction(task, gold, "apple river stone lamp")[0] == 1.0
    assert score_prediction(task, gold, "none")[0] == 0.0


def test_unknown_task_uses_the_substring_fallback():
    assert score_prediction("math", "42", "the answer is 42")[0] == 1.0
    assert score_prediction("math", "42", "the answer is 41")[0] == 0.0
    assert score_prediction("math", ["x", "y"], "Y")[0] == 1.0


def test_empty_or_none_prediction_scores_zero():
    for task, gold in (("mcq", "A"), ("qa", ["a"]), ("cwe", ["a"]), ("other", "a")):
        assert score_prediction(task, gold, None)[0] == 0.0
        assert score_prediction(task, gold, "")[0] == 0.0


@pytest.mark.parametrize(
    "task, gold",
    [("mcq", "E"), ("mcq", "AB"), ("mcq", ["A"]), ("qa", "Paris"), ("qa", []), ("cwe", ["a", 3]), ("other", ""), ("", "a")],
)
def test_malformed_gold_is_detected(task, gold):
    assert check_gold(task, gold)


def test_malformed_gold_reported_with_line_number(tmp_path):
    path = tmp_path / "set.jsonl"
    rows = [{"task": "mcq", "question": "q", "gold": "A"}, {"task": "qa", "question": "q", "gold": "not a list"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(SoarError, match="line 2"):
        read_correctness_set(path)


def test_score_rows_keeps_failures_and_reports_unknown_tasks():
    rows = [
        {"task": "mcq", "question": "q", "gold": "A"},
        {"task": "qa", "question": "q", "gold": ["x"]},
        {"task": "weird", "question": "q", "gold": "z"},
        {"task": "cwe", "question": "q", "gold": ["a", "b"]},
    ]
    preds = [
        {"prediction": "ANSWER: A"},
        {"prediction": "", "failed": True, "error": "HTTP 500"},
        {"prediction": "zzz"},
        {"prediction": "a"},
    ]
    records = score_rows(rows, preds)
    assert [r["score"] for r in records] == [1.0, 0.0, 1.0, 0.5]
    assert records[1]["failed"] and records[1]["error"] == "HTTP 500"
    summary = summarize(records, 80.0, SCORE_CFG)
    assert summary["ori_accuracy"] == 62.5
    assert summary["normalized_accuracy"] == pytest.approx(78.125)
    assert summary["C"] == 0.0
    assert summary["unknown_tasks"] == ["weird"]
    assert summary["failed"] == 1
    assert summary["per_task"]["cwe"] == {"accuracy": 50.0, "n": 1}
    assert any("fallback" in w for w in summary["warnings"])
    with pytest.raises(SoarError, match="3 predictions for 4"):
        score_rows(rows, preds[:3])


def test_c_bands_and_bootstrap_warning():
    # 79 of 100 right: ori 79, normalized 98.75 -> C 0.96; the interval spans several bands
    records = [{"task": "mcq", "score": 1.0 if i < 79 else 0.0, "prediction": "x"} for i in range(100)]
    summary = summarize(records, 80.0, SCORE_CFG, Bootstrap(resamples=500, seed=0, confidence=0.95))
    assert summary["C"] == 0.96
    boot = summary["bootstrap"]
    assert boot["ori_low"] < 79 < boot["ori_high"]
    assert boot["crosses_c_band"]
    assert any("crosses a C band" in w for w in summary["warnings"])
    # deterministic for a seed; all-right samples give a zero-width interval and no warning
    assert bootstrap_ci([1.0, 0.0, 1.0], 200, 3, 0.95) == bootstrap_ci([1.0, 0.0, 1.0], 200, 3, 0.95)
    perfect = summarize([{"task": "qa", "score": 1.0, "prediction": "x"}] * 10, 80.0, SCORE_CFG, Bootstrap(resamples=100, seed=0, confidence=0.95))
    assert perfect["C"] == 1.0 and not perfect["bootstrap"]["crosses_c_band"]


def test_reported_pairs_of_rules_md():
    # RULES.md 1: ori 78.71 -> C 0.96; 78.07 -> 0.92; 76.64 -> 0
    from soarlab.final_score import coefficient, normalized_accuracy

    for ori, c in ((78.71, 0.96), (78.07, 0.92), (76.64, 0.0), (80.0, 1.0), (95.0, 1.0)):
        assert coefficient(normalized_accuracy(ori, 80.0, 100), SCORE_CFG.c_table, 0.0) == c


def test_read_predictions_formats(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"prediction": "ANSWER: A", "task": "mcq"}),
                json.dumps({"prediction": None}),
                json.dumps("bare string"),
                json.dumps({"response": "alias field"}),
                json.dumps({"prediction": "", "error": "timeout"}),
            ]
        )
        + "\n"
    )
    preds = read_predictions(path)
    assert [p["prediction"] for p in preds] == ["ANSWER: A", None, "bare string", "alias field", ""]
    assert preds[4]["failed"] and not preds[0].get("failed")
    path.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(SoarError, match="line 1 has no prediction field"):
        read_predictions(path)


def test_embedded_set_is_valid_and_covers_all_tasks():
    from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED

    rows = read_correctness_set(EMBEDDED)
    assert len(rows) >= 100  # one question moves ori by a point at most
    assert {r["task"] for r in rows} == {"mcq", "qa", "niah", "lcx", "cwe", "fwe"}
