#!/usr/bin/env python3
"""GPU recipe: serving variants of one small Llama side by side (docs/PERFORMANCE.md, "Speculative decoding
on a GPU" and "Weight and KV formats on a GPU").

The small Llama of models.py and a draft for it are trained on the GPU (spec_models.py: a random draft is
never accepted, and a trained target gives answers worth comparing). For each variant, one SGLang server is
started by `soarlab.engines.open_engine` with the variant's overrides (the flags the pipeline and the
submission pass); greedy answers to the speed set's prompts are asked, the three levels run the official way on
one speed set (soarlab.bench.runner), and the same answers are asked again after the levels. Reported per
variant: per-level durations, speculative acceptance as bench reads it, `answers_differ` against the first
variant's answers (the baseline, `none`), and `after_load_differ` (answers that changed on the same server
after the levels: eval.after_load's check). OUT/results.json is written as each variant ends.

`gptq_w4` serves random 4-bit weights in the preset's GPTQ layout on SGLang's Marlin kernel (the GPU host has
no GPTQModel to quantize the trained target): its durations are the kernel's, its answers are not compared.
marlin_check.py checks what Marlin computes from a real checkpoint.

    python3 scripts/gpu/serving_check.py --out OUT --variants none standalone ngram [--num-requests 16]
        [--profile 0.1k-0.5k] [--answer-tokens 64] [--jit-done FILE]
(scripts/gpu/run.sh runs it as the steps `spec` and `formats`)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "src"), str(HERE)]
import spec_models  # noqa: E402
from models import quantization_config, wait_for_jit  # noqa: E402
from soarlab.atomic import write_json, write_jsonl  # noqa: E402

WORK = Path("/tmp/soarlab-serving")
# Each variant's overrides on top of ENGINE and the small Llama (quant=none, spec=none).
VARIANTS = {
    "none": [],
    "standalone": ["spec=standalone"],
    "ngram": ["spec=ngram"],
    "fp8": ["quant=fp8"],  # the bf16 weights quantized by SGLang at load (--quantization fp8)
    "fp8_kv": ["+engine.server_args.kv-cache-dtype=fp8_e4m3"],
    "gptq_w4": ["quant=gptq_w4", "+engine.server_args.load-format=dummy"],
}
DUMMY_WEIGHTS = {"gptq_w4": "gptq_w4"}  # variant -> the quant preset whose layout its random weights take
# The GPU recipes' SGLang settings (pipeline_check.sh): the small Llama on the triton backend, CUDA graphs on.
ENGINE = ["engine=sglang", f"engine.python={sys.executable}", "engine.server_args.attention-backend=triton",
          "engine.server_args.dense-as-sparse=false", "+engine.server_args.cuda-graph-max-bs=8",
          "+engine.server_args.mem-fraction-static=0.5", "engine.jit_cache_dir=null"]


def greedy_answers(server, prompts: list[str], tokens: int) -> list[str]:
    from soarlab.engines.server import http_request

    answers = []
    for prompt in prompts:
        status, text = http_request(f"{server.base_url}/generate", "POST", timeout=300, body={
            "text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": tokens}})
        answers.append(json.loads(text)["text"] if status == 200 else f"HTTP {status}")
    return answers


def dummy_checkpoint(target: Path, preset: str) -> Path:
    """The target's config, tokenizer and a quantization_config for `preset`, without weights (load-format dummy)."""
    folder = WORK / f"{target.name}_{preset}"
    folder.mkdir(parents=True, exist_ok=True)
    for file in target.iterdir():
        if file.is_file() and file.suffix != ".safetensors":
            (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((target / "config.json").read_text())
    config["quantization_config"] = quantization_config(config, preset)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def one_variant(name: str, target: Path, draft: Path, speed_set: Path, tokens: int) -> dict:
    from soarlab.bench.preflight import prepare
    from soarlab.bench.runner import run_level
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer
    from soarlab.engines import open_engine

    cfg = compose([*ENGINE, "model.source=local", f"model.local_path={target}", "quant=none", "spec=none",
                   *VARIANTS[name], "spec.draft.source=local", f"spec.draft.local_path={draft}",
                   f"paths.draft_model={draft}", "bench.repeats=1", "bench.progress=false"], root=ROOT)
    if name in DUMMY_WEIGHTS:
        target = dummy_checkpoint(target, DUMMY_WEIGHTS[name])
    tok = load_tokenizer(str(target))
    requests, info = prepare(speed_set, tok, cfg.bench)
    prompts = [r.prompt for r in requests]
    started = time.time()
    with open_engine(cfg, target, WORK / f"server_{name}.log") as server:
        ready_s = time.time() - started
        answers = greedy_answers(server, prompts, tokens)
        levels = {}
        for level, concurrency in cfg.bench.levels.items():
            report, _ = run_level(server, requests, level, concurrency, cfg.bench, tok, info)
            levels[level] = {"duration_s": report.duration_s, "invalid": report.invalid_reasons,
                             "spec": report.server_metrics.get("spec")}
            print(f"{name} {level}: {report.duration_s} s, {levels[level]['spec']}", flush=True)
        after = greedy_answers(server, prompts, tokens)
    return {"ready_s": round(ready_s, 1), "levels": levels, "answers": answers,
            "after_load_differ": sum(a != b for a, b in zip(answers, after))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["none", "standalone", "ngram"],
                        help="the first is the baseline the others' answers are compared with")
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--profile", default="0.1k-0.5k")
    parser.add_argument("--answer-tokens", type=int, default=64)
    parser.add_argument("--jit-done", type=Path, help="a file whose existence says the gptq_marlin JIT pre-warm finished")
    args = parser.parse_args()
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer, make_speed_set

    target, draft = WORK / "small_llama", WORK / "small_llama_draft"
    if not (draft / "config.json").is_file():
        spec_models.write_trained_pair(target, draft)
    profile = compose([], root=ROOT).bench.profiles[args.profile].model_dump()
    speed_set = WORK / "speed.jsonl"
    write_jsonl(speed_set, make_speed_set(load_tokenizer(str(target)), profile, args.num_requests))
    baseline = args.variants[0]
    results: dict = {"profile": args.profile, "num_requests": args.num_requests, "baseline": baseline}
    for name in args.variants:
        if name in DUMMY_WEIGHTS:
            wait_for_jit(args.jit_done)
        try:
            results[name] = one_variant(name, target, draft, speed_set, args.answer_tokens)
        except Exception as exc:  # noqa: BLE001 - the other variants still run; the error is the result
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        if "answers" in results[name] and "answers" in results.get(baseline, {}) and name not in DUMMY_WEIGHTS:
            pairs = zip(results[baseline]["answers"], results[name]["answers"])
            results[name]["answers_differ"] = sum(a != b for a, b in pairs)
        write_json(args.out / "results.json", results)
    summary = {name: ({lvl: v["duration_s"] for lvl, v in r["levels"].items()}, r.get("answers_differ"),
                      r.get("after_load_differ"))
               if "levels" in r else r.get("error", "")[:200] for name, r in results.items() if name in VARIANTS}
    print("SUMMARY", json.dumps(summary))


if __name__ == "__main__":
    main()
