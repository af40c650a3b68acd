#!/usr/bin/env python3
"""GPU recipe: speculative decoding on SGLang (docs/PERFORMANCE.md, "Speculative decoding on a GPU").

The small Llama of models.py and a draft for it are trained on the GPU (spec_models.py: a random draft
is never accepted). For each of spec=none, standalone and ngram, one SGLang server is started by
`soarlab.engines.open_engine` with the spec group's flags (what the pipeline and the submission pass),
the three levels run the official way on one speed set (soarlab.bench.runner), acceptance is read per
level as bench reads it, and greedy answers to the speed set's prompts (no ignore_eos) are compared with
spec=none's: how many differ. OUT/results.json is written as each method ends.

    python3 scripts/gpu/spec_check.py --out OUT [--num-requests 16] [--profile 0.1k-0.5k] [--answer-tokens 64]
(scripts/gpu/run.sh runs it as the step `spec`)
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
from soarlab.atomic import write_json, write_jsonl  # noqa: E402

WORK = Path("/tmp/soarlab-spec")
METHODS = ("none", "standalone", "ngram")
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


def one_method(method: str, target: Path, draft: Path, speed_set: Path, tokens: int) -> dict:
    from soarlab.bench.cli import prepare
    from soarlab.bench.runner import run_level
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer
    from soarlab.engines import open_engine

    cfg = compose([*ENGINE, "model.source=local", f"model.local_path={target}", "quant=none", f"spec={method}",
                   "spec.draft.source=local", f"spec.draft.local_path={draft}", f"paths.draft_model={draft}",
                   "bench.repeats=1", "bench.progress=false"], root=ROOT)
    tok = load_tokenizer(str(target))
    requests, info = prepare(speed_set, tok, cfg.bench)
    started = time.time()
    with open_engine(cfg, target, WORK / f"server_{method}.log") as server:
        ready_s = time.time() - started
        levels = {}
        for level, concurrency in cfg.bench.levels.items():
            report, _ = run_level(server, requests, level, concurrency, cfg.bench, tok, info)
            levels[level] = {"duration_s": report.duration_s, "invalid": report.invalid_reasons,
                             "spec": report.server_metrics.get("spec")}
            print(f"{method} {level}: {report.duration_s} s, {levels[level]['spec']}", flush=True)
        answers = greedy_answers(server, [r.prompt for r in requests], tokens)
    return {"ready_s": round(ready_s, 1), "levels": levels, "answers": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--profile", default="0.1k-0.5k")
    parser.add_argument("--answer-tokens", type=int, default=64)
    args = parser.parse_args()
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer, make_speed_set

    target, draft = WORK / "small_llama", WORK / "small_llama_draft"
    if not (draft / "config.json").is_file():
        spec_models.write_trained_pair(target, draft)
    profile = compose([], root=ROOT).bench.profiles[args.profile].model_dump()
    speed_set = WORK / "speed.jsonl"
    write_jsonl(speed_set, make_speed_set(load_tokenizer(str(target)), profile, args.num_requests))
    results: dict = {"profile": args.profile, "num_requests": args.num_requests}
    for method in METHODS:
        try:
            results[method] = one_method(method, target, draft, speed_set, args.answer_tokens)
        except Exception as exc:  # noqa: BLE001 - the other methods still run; the error is the result
            results[method] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        if "answers" in results[method] and "answers" in results.get("none", {}):
            pairs = zip(results["none"]["answers"], results[method]["answers"])
            results[method]["answers_differ"] = sum(a != b for a, b in pairs)
        write_json(args.out / "results.json", results)
    summary = {m: ({lvl: v["duration_s"] for lvl, v in r["levels"].items()}, r.get("answers_differ"))
               if "levels" in r else r.get("error", "")[:200] for m, r in results.items() if m in METHODS}
    print("SUMMARY", json.dumps(summary))


if __name__ == "__main__":
    main()
