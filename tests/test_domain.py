"""The domain words (soarlab/domain.py) agree with the config, and no module keeps its own copy."""

from __future__ import annotations

import re

from soarlab.config import compose
from soarlab.corpus import CORPUS_PATH
from soarlab.domain import GPTQ_V1, GPTQ_V2, LAYER_RE, LEVELS, gptq_format_version

from support import ROOT

SRC = ROOT / "src" / "soarlab"


def test_levels_match_bench_levels_and_score_weights():
    cfg = compose()
    assert tuple(cfg.bench.levels) == LEVELS
    assert set(cfg.score.weights) == set(LEVELS)


def test_words_mean_what_they_say():
    assert CORPUS_PATH.is_file() and len(CORPUS_PATH.read_text()) > 100_000
    m = LAYER_RE.match("model.layers.17.self_attn.q_proj")
    assert m and m.groups() == ("17", "self_attn.q_proj")
    assert not LAYER_RE.match("model.embed_tokens")
    assert (gptq_format_version(GPTQ_V1), gptq_format_version(GPTQ_V2)) == (1, 2)


def test_no_second_copy_in_the_code():
    copies = {
        "level names": re.compile(r"""["']S1["'],\s*["']S8["'],\s*["']Smax["']"""),
        "corpus path": re.compile(r"""["']corpus\.txt["']"""),
        "layer regex": re.compile(r"model\\\\?\.layers\\\\?\.\(\\\\?d\+\)"),
        "GPTQ v2 name": re.compile(r"""["']gptq_v2["']"""),
    }
    homes = {"domain.py", "corpus.py"}  # corpus.py holds the corpus path alone (only its readers import it)
    found = [f"{path.relative_to(SRC)}: {word}" for path in SRC.rglob("*.py")
             if path.relative_to(SRC).as_posix() not in homes
             for word, pattern in copies.items() if pattern.search(path.read_text())]
    assert found == []
