"""Make SOAR-format speed sets with token-exact lengths, from real text (RULES.md 2).

A row is `{"question": text, "model_response": text}` where `len(tokenizer.encode(question))`
and `len(tokenizer.encode(model_response))` are exactly the lengths drawn for it, counted as
the benchmark counts them (the tokenizer's defaults, BOS included). Text is cut from the
embedded corpus (`soarlab/tiny/corpus.txt`), repeated as needed for long inputs.

Profiles live in config (`bench.profiles`, conf/bench/soar.yaml): a `mix` of components
`{weight, input_tokens: [lo, hi], output_tokens: [lo, hi]}`; each row draws a component by
weight and its lengths uniformly. Everything is drawn from `random.Random(seed)`: same
tokenizer, profile, count and seed give the same file.
"""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from typing import Iterable

from soarlab.corpus import CORPUS_PATH
from soarlab.errors import SoarError
from soarlab.schema import Profile

_MAX_FIX_STEPS = 12


def named_profile(profiles: dict[str, Profile], name: str) -> dict:
    """`bench.profiles[name]` as plain data, what make_speed_set reads (the composed config is the file of record)."""
    if name not in profiles:
        raise SoarError(f"unknown speed-set profile {name!r}", f"use one of {', '.join(profiles)}")
    return profiles[name].model_dump()


def check_profile(profile: dict) -> dict:
    mix = profile.get("mix")
    if not mix:
        raise SoarError("speed-set profile has no `mix` components", "give it mix: [{weight, input_tokens, output_tokens}]")
    for comp in mix:
        for key in ("input_tokens", "output_tokens"):
            lo, hi = comp[key]
            if not 2 <= lo <= hi:
                raise SoarError(f"bad {key} range {[lo, hi]} in a speed-set profile", "use 2 <= lo <= hi")
    return profile


class _TokenText:
    """Cut text of an exact token count out of the corpus stream (repeated as needed)."""

    def __init__(self, tokenizer, corpus: str):
        self.tok = tokenizer
        self.ids = tokenizer.encode(corpus, add_special_tokens=False, verbose=False)  # the whole corpus: longer than the model on purpose
        self.extra = len(tokenizer.encode("a")) - len(tokenizer.encode("a", add_special_tokens=False))
        if len(self.ids) < 64:
            raise SoarError("the corpus encodes to too few tokens", "use a longer corpus text")

    def _window(self, start: int, count: int) -> list[int]:
        n = len(self.ids)
        start %= n
        out: list[int] = []
        while len(out) < count:
            take = min(count - len(out), n - start)
            out.extend(self.ids[start : start + take])
            start = 0
        return out

    def text(self, target: int, rng: random.Random) -> str:
        """Text whose `len(tokenizer.encode(text))` is exactly `target` (BOS and friends counted)."""
        for _attempt in range(50):
            start = rng.randrange(len(self.ids))
            count = max(1, target - self.extra)
            seen = set()
            for _ in range(_MAX_FIX_STEPS):
                text = self.tok.decode(self._window(start, count)).strip()
                have = len(self.tok.encode(text))
                if have == target:
                    return text
                if count in seen:
                    break
                seen.add(count)
                count = max(1, count + (target - have))
        raise SoarError(
            f"could not cut a text of exactly {target} tokens from the corpus with this tokenizer",
            "check the tokenizer round-trips text (decode then encode)",
        )


def make_speed_set(
    tokenizer, profile: dict, num_requests: int, seed: int = 1, corpus: str | None = None, progress: bool = False
) -> list[dict]:
    """`num_requests` rows `{"question", "model_response"}` with token-exact lengths drawn from `profile`
    (a `bench.profiles` entry). Deterministic for a given seed.
    """
    if num_requests < 1:
        raise SoarError(f"num_requests must be at least 1 (got {num_requests})", "ask for one or more requests")
    prof = check_profile(profile)
    cutter = _TokenText(tokenizer, corpus if corpus is not None else CORPUS_PATH.read_text(encoding="utf-8"))
    rng = random.Random(seed)
    weights = [float(c.get("weight", 1.0)) for c in prof["mix"]]
    rows = []
    steps = range(num_requests)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc="speed set", unit="req")
    for _ in steps:
        comp = rng.choices(prof["mix"], weights=weights)[0]
        n_in = rng.randint(*comp["input_tokens"])
        n_out = rng.randint(*comp["output_tokens"])
        rows.append({"question": cutter.text(n_in, rng), "model_response": cutter.text(n_out, rng)})
    return rows


def load_tokenizer(name_or_dir: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_dir, trust_remote_code=True)
    except Exception as exc:  # noqa: BLE001 - many loader errors; one message for the user
        raise SoarError(
            f"could not load a tokenizer from {name_or_dir} ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
            "give a model directory that holds tokenizer files",
        ) from None


def context_length(tokenizer) -> int | None:
    """The model's context in tokens: max_position_embeddings of the config.json beside its tokenizer,
    else the tokenizer's model_max_length (None: neither says; transformers' "unset" is a huge number)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        limit = json.loads((Path(tokenizer.name_or_path) / "config.json").read_text()).get("max_position_embeddings")
        if isinstance(limit, int):
            return limit
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 10**9 else None


def check_context(lengths: Iterable[tuple[int, int, int]], limit: int | None, source) -> None:
    """Refuse the first (line, prompt tokens, output tokens) whose prompt and output overflow `limit`:
    the server would fail it, or spend the machine's memory trying."""
    if limit is None:
        return
    for line, prompt, output in lengths:
        if prompt + output > limit:
            raise SoarError(f"{source} line {line}: prompt {prompt:,} + output {output:,} tokens exceed the "
                            f"model's context of {limit:,}", "shorten it or serve a longer-context model")


def check_profile_context(profile: dict, name: str, limit: int | None) -> None:
    """A generated set's longest request (every component's longest input and output) within the context."""
    longest = max(comp["input_tokens"][1] + comp["output_tokens"][1] for comp in profile["mix"])
    if limit is not None and longest > limit:
        raise SoarError(f"speed-set profile {name} asks for up to {longest:,} tokens a request, over the model's "
                        f"context of {limit:,} tokens", "pick a profile within the context (bench.dataset.profile)")
