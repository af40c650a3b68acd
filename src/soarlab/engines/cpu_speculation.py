"""Speculative decoding in `transformers serve` (the CPU engine), asked for with SGLang's own flags.

soarlab.engines.transformers_serve takes `--speculative-algorithm`, `--speculative-draft-model-path`,
`--speculative-num-steps`, `--speculative-eagle-topk` and `--speculative-num-draft-tokens` (what
soarlab.speculative renders for SGLang too) and maps them onto transformers' candidate generation:
- STANDALONE: assisted generation with the draft model (`assistant_model`), `num_steps` drafted
  tokens per verification (a constant schedule; transformers still stops a draft early when the
  draft model is unsure);
- NGRAM: prompt-lookup decoding, `num_draft_tokens` tokens copied per verification.
Every verification is counted, and GET /metrics serves the counts in Prometheus text, which bench
samples per level (soarlab.bench.server_metrics) to report acceptance.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass

from soarlab.speculative import CPU_ALGORITHMS

FLAGS = {"--speculative-algorithm": "algorithm", "--speculative-draft-model-path": "draft_path",
         "--speculative-num-steps": "num_steps", "--speculative-eagle-topk": "eagle_topk",
         "--speculative-num-draft-tokens": "num_draft_tokens"}
# Prometheus counters at GET /metrics; conf/bench/tiny.yaml names them in bench.server_metrics.counters.
COUNTERS = {"verify_steps": "soarlab_spec_verify_steps_total", "draft_tokens": "soarlab_spec_draft_tokens_total",
            "accepted_tokens": "soarlab_spec_accepted_tokens_total"}


@dataclass
class Speculation:
    algorithm: str
    draft_path: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None


def pop_flags(argv: list[str]) -> Speculation | None:
    """Remove the `--speculative-*` flags from argv (transformers serve does not know them); what they ask."""
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        if argv[i] in FLAGS and i + 1 < len(argv):
            found[FLAGS[argv[i]]] = argv[i + 1]
            del argv[i:i + 2]
        else:
            i += 1
    if not found:
        return None
    algorithm = found.pop("algorithm", None)
    if algorithm not in CPU_ALGORITHMS:
        raise SystemExit(f"transformers_serve: --speculative-algorithm {algorithm} is not offered on the CPU engine "
                         f"(use one of {', '.join(CPU_ALGORITHMS)})")
    if algorithm == "STANDALONE" and not found.get("draft_path"):
        raise SystemExit("transformers_serve: --speculative-algorithm STANDALONE needs --speculative-draft-model-path")
    numbers = {k: int(v) for k, v in found.items() if k != "draft_path"}
    return Speculation(algorithm, found.get("draft_path"), **numbers)


class Counts:
    """Verifications, drafted and accepted tokens since the server started (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values = dict.fromkeys(COUNTERS, 0)

    def add(self, **increments: int) -> None:
        with self._lock:
            for key, value in increments.items():
                self.values[key] += value

    def prometheus(self) -> str:
        with self._lock:
            values = dict(self.values)
        lines = []
        for key, metric in COUNTERS.items():
            family = metric.removesuffix("_total")
            lines += [f"# TYPE {family} counter", f"{metric} {values[key]}"]
        return "\n".join(lines) + "\n"


COUNTS = Counts()


def _count_verifications() -> None:
    """Wrap transformers' candidate generators: each get_candidates drafts tokens, each
    update_candidate_strategy closes one verification with `num_matches` drafted tokens accepted."""
    from transformers.generation import candidate_generator as cg

    for cls in (cg.AssistedCandidateGenerator, cg.PromptLookupCandidateGenerator):
        get_candidates, update = cls.get_candidates, cls.update_candidate_strategy

        def counted_get(self, input_ids, *args, _get=get_candidates, **kwargs):
            candidates, logits = _get(self, input_ids, *args, **kwargs)
            COUNTS.add(draft_tokens=int(candidates.shape[-1] - input_ids.shape[-1]))
            return candidates, logits

        def counted_update(self, input_ids, scores, num_matches, _update=update):
            COUNTS.add(verify_steps=1, accepted_tokens=int(num_matches))
            return _update(self, input_ids, scores, num_matches)

        cls.get_candidates, cls.update_candidate_strategy = counted_get, counted_update


def _load_draft(spec: Speculation, dtype, device):
    """The draft model, drafting `num_steps` tokens per verification (transformers reads that from the
    draft's own generation config). It drafts without the request's stop strings: the target's stopping
    criteria end the answer, and the draft's generate() has no tokenizer to match them with."""
    from transformers import AutoModelForCausalLM

    draft = AutoModelForCausalLM.from_pretrained(spec.draft_path, dtype=dtype).to(device).eval()
    if spec.num_steps:
        draft.generation_config.num_assistant_tokens = spec.num_steps
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    generate = draft.generate

    def generate_without_stop_strings(*args, generation_config=None, **kwargs):
        if generation_config is not None and generation_config.stop_strings:
            generation_config = copy.copy(generation_config)
            generation_config.stop_strings = None
        return generate(*args, generation_config=generation_config, **kwargs)

    draft.generate = generate_without_stop_strings
    return draft


class _OneTokenRows:
    """Hands `transformers serve`'s streamer the tokens of a verification as one row: assisted decoding
    puts a (1, n) tensor, which the streamer would count (and so report in `usage`) as a single token."""

    def __init__(self, streamer):
        self.streamer = streamer

    def put(self, value) -> None:
        self.streamer.put(value.reshape(-1))

    def end(self) -> None:
        self.streamer.end()


def _attach(model, spec: Speculation) -> None:
    """Every generate() of `model` drafts as `spec` says; the draft model is loaded once, like the target."""
    generate = model.generate
    draft = _load_draft(spec, model.dtype, model.device) if spec.algorithm == "STANDALONE" else None

    def speculative_generate(*args, generation_config=None, **kwargs):
        config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
        if kwargs.get("streamer") is not None:
            kwargs["streamer"] = _OneTokenRows(kwargs["streamer"])
        if draft is None:
            config.prompt_lookup_num_tokens = spec.num_draft_tokens or 10  # transformers' documented default
        else:
            kwargs["assistant_model"] = draft
        return generate(*args, generation_config=config, **kwargs)

    model.generate = speculative_generate


def install(spec: Speculation) -> None:
    """Make the transformers serve about to start decode speculatively and serve GET /metrics."""
    from fastapi.responses import PlainTextResponse
    from transformers.cli.serving import model_manager, server

    _count_verifications()
    load_model = model_manager.ModelManager._load_model

    def load_speculative(self, *args, **kwargs):
        model = load_model(self, *args, **kwargs)
        _attach(model, spec)
        return model

    model_manager.ModelManager._load_model = load_speculative
    build_server = server.build_server

    def build_with_metrics(*args, **kwargs):
        app = build_server(*args, **kwargs)
        app.add_api_route("/metrics", lambda: PlainTextResponse(COUNTS.prometheus()), methods=["GET"])
        return app

    server.build_server = build_with_metrics
