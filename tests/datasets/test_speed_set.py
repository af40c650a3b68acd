"""Speed sets: token-exact lengths (BOS counted, as bench counts), profiles from config, determinism."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from soarlab.datasets.soar import read_jsonl, read_speed_set
from soarlab.config import compose, plain
from soarlab.commands.measure import make_speed_set_cli
from soarlab.datasets.speed import make_speed_set, named_profile
from soarlab.errors import SoarError

from support import ROOT


def _lengths(tok, rows):
    return [(len(tok.encode(r["question"])), len(tok.encode(r["model_response"]))) for r in rows]


PROFILES = compose().bench.profiles


def test_profiles_live_in_config():
    assert {"tiny", "0.1k-4k", "0.1k-0.5k", "60k-0.5k", "long-mix"} <= set(PROFILES)
    conf = OmegaConf.load(ROOT / "conf" / "bench" / "soar.yaml")
    assert OmegaConf.to_container(conf.profiles) == {name: plain(p) for name, p in PROFILES.items()}


@pytest.mark.parametrize("profile", ["tiny", "0.1k-0.5k"])
def test_token_exact_lengths_within_profile(tiny_tokenizer, profile):
    rows = make_speed_set(tiny_tokenizer, named_profile(PROFILES, profile), 6, seed=3)
    comp = named_profile(PROFILES, profile)["mix"][0]
    assert len(rows) == 6
    for n_in, n_out in _lengths(tiny_tokenizer, rows):
        assert comp["input_tokens"][0] <= n_in <= comp["input_tokens"][1]
        assert comp["output_tokens"][0] <= n_out <= comp["output_tokens"][1]


def test_exact_targets_bos_counted(tiny_tokenizer):
    prof = {"mix": [{"weight": 1, "input_tokens": [37, 37], "output_tokens": [5, 5]}]}
    rows = make_speed_set(tiny_tokenizer, prof, 4, seed=1)
    assert _lengths(tiny_tokenizer, rows) == [(37, 5)] * 4
    assert tiny_tokenizer.encode(rows[0]["question"])[0] == tiny_tokenizer.bos_token_id


def test_long_inputs_repeat_the_corpus(tiny_tokenizer):
    prof = {"mix": [{"weight": 1, "input_tokens": [70000, 70000], "output_tokens": [3, 3]}]}
    rows = make_speed_set(tiny_tokenizer, prof, 1, seed=1)
    assert _lengths(tiny_tokenizer, rows) == [(70000, 3)]


def test_deterministic_by_seed(tiny_tokenizer):
    tiny = named_profile(PROFILES, "tiny")
    a = make_speed_set(tiny_tokenizer, tiny, 5, seed=7)
    assert a == make_speed_set(tiny_tokenizer, tiny, 5, seed=7)
    assert a != make_speed_set(tiny_tokenizer, tiny, 5, seed=8)


def test_bad_profile_and_count(tiny_tokenizer):
    with pytest.raises(SoarError, match="unknown speed-set profile"):
        named_profile(PROFILES, "nope")
    with pytest.raises(SoarError, match="num_requests"):
        make_speed_set(tiny_tokenizer, named_profile(PROFILES, "tiny"), 0)


def test_cli_writes_a_soar_format_set(tiny_model_dir, tiny_tokenizer, tmp_path):
    out = tmp_path / "speed.jsonl"
    args = SimpleNamespace(profile="tiny", tokenizer=str(tiny_model_dir), num_requests=5, seed=1, output=str(out),
                           overrides=[])
    assert make_speed_set_cli(args) == 0
    rows = read_speed_set(out)
    assert len(rows) == 5 and set(json.loads(out.read_text().splitlines()[0])) == {"question", "model_response"}
    # without --seed, bench.dataset.seed (the config's, not a second default in the CLI)
    assert make_speed_set_cli(SimpleNamespace(**{**vars(args), "seed": None, "overrides": ["bench.dataset.seed=7"]})) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == make_speed_set(tiny_tokenizer, named_profile(PROFILES, "tiny"), 5, seed=7)


def test_reader_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "model_response": "a"}\n\n{"question": "q"}\n')
    with pytest.raises(SoarError, match=r"line 3 has no \"model_response\"|line 3 has no model_response"):
        read_speed_set(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(SoarError, match="empty"):
        read_speed_set(empty)
    notjson = tmp_path / "nj.jsonl"
    notjson.write_text('{"input": "q", "model_response": "a"}\nnot json\n')
    with pytest.raises(SoarError, match="line 2 is not valid JSON"):
        read_jsonl(notjson, [("question", "input", "prompt")])


def test_input_and_prompt_fields_accepted(tmp_path):
    p = tmp_path / "alt.jsonl"
    p.write_text('{"input": "a b", "model_response": "x"}\n{"prompt": "c d", "model_response": "y"}\n')
    assert [r["prompt"] for r in read_speed_set(p)] == ["a b", "c d"]
