"""Speculative decoding (the `spec` group): which combinations can run, and the server flags asking for it.

SGLang takes `--speculative-algorithm` with its settings (RULES.md 6); the same flags go into the
submission's SGLANG_SERVER_ARGS. The CPU engine's launcher (soarlab.engines.transformers_serve)
takes the same flags and maps them onto transformers' generation: STANDALONE is assisted generation
with the draft model, NGRAM is prompt-lookup decoding. Greedy decoding gives the same tokens either
way, so the whole effect is on the durations (the accuracy stage's losslessness check says whether
the answers stayed the same).
"""

from __future__ import annotations

from pathlib import Path

from soarlab.errors import SoarError

DRAFTED = ("STANDALONE", "EAGLE", "EAGLE3")  # algorithms that need a draft model
CPU_ALGORITHMS = ("STANDALONE", "NGRAM")  # what transformers' generation offers
HUB_SOURCES = ("huggingface", "modelscope")


def enabled(spec) -> bool:
    return spec.algorithm is not None


def needs_draft(spec) -> bool:
    return spec.algorithm in DRAFTED


def check(cfg) -> None:
    """Refuse, in one line, a speculative-decoding combination known to fail (the first one found). A draft
    set for an algorithm that uses none is ignored (fetch-draft fetches nothing), so one sweep can pair
    `spec=none,standalone,ngram` with the draft standalone needs."""
    spec, draft = cfg.spec, cfg.spec.draft
    if not enabled(spec):
        return
    algorithm = spec.algorithm
    if needs_draft(spec):
        if draft.source == "none":
            _refuse(f"spec.algorithm={algorithm} needs a draft model, and spec.draft.source is none",
                    "set spec.draft (source=huggingface with repo_id and revision, or source=local with local_path)")
        if draft.source in HUB_SOURCES and not (draft.repo_id and draft.revision):
            _refuse(f"spec.draft.source={draft.source} needs spec.draft.repo_id and a pinned spec.draft.revision",
                    "set both (the revision is a 40-hex commit sha, so the draft is the same on every machine)")
        if draft.source == "local" and not draft.local_path:
            _refuse("spec.draft.source=local needs spec.draft.local_path", "set it to the folder holding the draft model")
        if draft.source == "embedded" and cfg.model.source != "embedded":
            _refuse(f"spec.draft.source=embedded is the tiny model's draft, and model={cfg.model.name} is another model",
                    "point spec.draft at a draft made for this model (source=huggingface or local)")
    topk = spec.eagle_topk or 1
    if topk > cfg.model.max_eagle_topk:
        _refuse(f"spec.eagle_topk={topk} on model={cfg.model.name}, which verifies draft chains only "
                f"(model.max_eagle_topk={cfg.model.max_eagle_topk}; RULES.md 6: the Lightning layers' recurrence "
                "cannot verify a tree)", "set spec.eagle_topk=1")
    engine = cfg.engine.name
    if engine == "transformers" and algorithm not in CPU_ALGORITHMS:
        _refuse(f"spec.algorithm={algorithm} is not offered by engine=transformers (transformers has no EAGLE drafting)",
                "on the CPU use spec=standalone (assisted generation) or spec=ngram (prompt lookup); "
                "EAGLE runs on engine=sglang")
    if engine == "sglang" and algorithm == "NGRAM":
        device = cfg.engine.server_args.get("device")
        if device not in (None, "cuda"):
            _refuse(f"spec.algorithm=NGRAM with engine.server_args.device={device}: SGLang's NGRAM runs on CUDA only "
                    "(RULES.md 6)", "use a CUDA GPU, or spec=standalone")


def server_flags(spec, draft_dir: str | Path | None) -> list[str]:
    """`--speculative-*` flags (SGLang's names, hyphenated) for `spec`; [] when it is off. The draft's path
    is given where it is known (a local launch); the submission's prepare_env.sh adds its own."""
    if not enabled(spec):
        return []
    flags = ["--speculative-algorithm", spec.algorithm]
    if needs_draft(spec) and draft_dir is not None:
        flags += ["--speculative-draft-model-path", str(draft_dir)]
    for name, value in (("num-steps", spec.num_steps), ("eagle-topk", spec.eagle_topk),
                        ("num-draft-tokens", spec.num_draft_tokens)):
        if value is not None:
            flags += [f"--speculative-{name}", str(value)]
    return flags


def _refuse(problem: str, fix: str) -> None:
    raise SoarError(problem, fix)
