"""Run the SOAR correctness task, and standard lm-eval tasks, against a served engine via lm-eval's Python API.

Correctness (RULES.md 3): `/v1/chat/completions`, one user message = question, temperature 0,
max_tokens from config, the model's EOS tokens as stop strings, `chat_template_kwargs` (thinking
on) in the request body, `num_concurrent` requests at once. lm-eval forwards generation kwargs it
does not know (here `chat_template_kwargs`) into the request body, which is how they reach the server.
"""

from __future__ import annotations

import logging
from pathlib import Path

from soarlab.errors import SoarError
from soarlab.schema import EvalGroup

log = logging.getLogger(__name__)
TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"
CORRECTNESS_TASK = "soar_correctness"


def api_root(base_url: str) -> str:
    """'http://h:p', 'http://h:p/' or 'http://h:p/v1' -> 'http://h:p'."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def correctness_gen_kwargs(eval_cfg: EvalGroup, stop: list[str]) -> dict:
    return {
        "until": list(stop),
        "max_gen_toks": eval_cfg.max_tokens,
        "temperature": eval_cfg.temperature,
        "do_sample": False,
        "chat_template_kwargs": dict(eval_cfg.chat_template_kwargs),
    }


def _chat_model(base_url: str, model: str, eval_cfg: EvalGroup):
    from soarlab.accuracy.client import SoarChatCompletion

    return SoarChatCompletion(
        base_url=f"{api_root(base_url)}/v1/chat/completions",
        model=model,
        num_concurrent=eval_cfg.num_concurrent,
        retries=eval_cfg.retries,
        retry_backoff_s=eval_cfg.retry_backoff_s,
        timeout=int(eval_cfg.timeout_s),
        max_gen_toks=eval_cfg.max_tokens,
        seed=eval_cfg.seed,
    )


def _quiet_lm_eval() -> None:
    from soarlab.quiet import drop

    for name in ("lm_eval", "lm-eval"):
        logging.getLogger(name).setLevel(logging.WARNING)
    drop("lm_eval.evaluator_utils", r"Metrics were not scored on the same number of documents",
         "by design: each row scores acc and the metric of its own task only (acc_mcq on mcq rows, ...), "
         "and no lm-eval group aggregation is used")
    drop("lm_eval.api.task", r"Custom kwargs can be passed to `--metadata`",
         "the task's dataset is our file, passed as task metadata by run_correctness")
    drop("lm_eval.models.api_models", r"^Exception:(CancelledError|KeyboardInterrupt|Terminated)\(",
         "lm-eval logs any exception of a request as an error, also the cancellation of the requests in flight "
         "when the run is stopped (SIGTERM, Ctrl-C): no request failed, and the CLI says why it stopped")


def evaluate_tasks(lm, loaded: dict, gen_kwargs: dict | None = None, **evaluate_kwargs) -> dict:
    """lm-eval's `evaluate` on tasks a TaskManager loaded, set up as `simple_evaluate` sets them up (our
    generation settings over the task's, its few-shot count or 0, lm-eval's default seeds), without what
    `simple_evaluate` adds to its results that SOAR Lab never reads: the environment report (torch's
    collect_env, which runs `pip list` in a process of its own), git's commit and the tokenizer's details."""
    import random

    import numpy as np
    from lm_eval.defaults import DEFAULT_OTHER_SEED, DEFAULT_RANDOM_SEED
    from lm_eval.evaluator import evaluate

    random.seed(DEFAULT_RANDOM_SEED)
    np.random.seed(DEFAULT_OTHER_SEED)
    for task in loaded["tasks"].values():
        if gen_kwargs is not None and task.get_config("output_type") == "generate_until":
            task.set_config(key="generation_kwargs", value=gen_kwargs, update=True)
        if task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=DEFAULT_OTHER_SEED)
    return evaluate(lm=lm, task_dict=loaded, bootstrap_iters=0, **evaluate_kwargs)


def run_correctness(
    base_url: str, model: str, data_file: str | Path, model_dir: str | Path, eval_cfg: EvalGroup
) -> tuple[list[dict], dict]:
    """Generate for every row of `data_file` through lm-eval. Returns (predictions in file order, lm-eval metrics).

    Each prediction is {"prediction": str, "failed": bool, "error": str|None, "tokens": int|None, "capped":
    bool} (soarlab.accuracy.lengths). Failed requests are kept.
    """
    from lm_eval.tasks import TaskManager

    from soarlab.accuracy.client import eos_stop_strings, parse_failed
    from soarlab.accuracy.lengths import count_tokens

    _quiet_lm_eval()
    stop = eos_stop_strings(model_dir)
    # The data file reaches the task's custom_dataset hook as task metadata (lm-eval's public way to
    # pass a custom dataset its arguments), so the task yaml is never read or patched here.
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False,
                          metadata={"correctness_file": str(Path(data_file).resolve())})
    if CORRECTNESS_TASK not in manager.all_tasks:  # pragma: no cover - packaging error
        raise SoarError(f"lm-eval task {CORRECTNESS_TASK} not found under {TASKS_DIR}", "reinstall soarlab (pip install -e .)")
    lm = _chat_model(base_url, model, eval_cfg)
    results = evaluate_tasks(lm, manager.load([CORRECTNESS_TASK]), gen_kwargs=correctness_gen_kwargs(eval_cfg, stop),
                             apply_chat_template=True, log_samples=True, limit=eval_cfg.limit)
    samples = sorted(results["samples"][CORRECTNESS_TASK], key=lambda s: s["doc_id"])
    predictions = []
    for sample in samples:
        resp = sample["filtered_resps"][0]
        text = resp[0] if isinstance(resp, list) else resp
        failed, error = parse_failed(text)
        predictions.append({"prediction": "" if failed or text is None else text, "failed": failed, "error": error})
    metrics = {
        key.split(",")[0]: value
        for key, value in results["results"][CORRECTNESS_TASK].items()
        if isinstance(value, (int, float)) and not key.endswith("_stderr,none") and "," in key
    }
    source = count_tokens(predictions, lm.usage, model_dir, eval_cfg.max_tokens)
    return predictions, {"metrics": metrics, "stop": stop, "gen_kwargs": correctness_gen_kwargs(eval_cfg, stop),
                         "lengths_source": source}


def _standard_task_manager():
    """lm-eval's own task registry (standard tasks fetch their data sets from the Hugging Face hub)."""
    from lm_eval.tasks import TaskManager

    return TaskManager()


def supports_echo_logprobs(base_url: str, model: str, timeout: float) -> tuple[bool, str]:
    """Ask /v1/completions for prompt logprobs (echo); lm-eval's loglikelihood tasks need them."""
    import requests

    body = {"model": model, "prompt": "Hello world", "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
    try:
        resp = requests.post(f"{api_root(base_url)}/v1/completions", json=body, timeout=timeout)
    except requests.RequestException as exc:
        return False, f"/v1/completions unreachable ({exc})"
    if not resp.ok:
        return False, f"/v1/completions answered HTTP {resp.status_code}"
    try:
        choice = resp.json()["choices"][0]
        token_logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
    except (ValueError, KeyError, IndexError, TypeError):
        return False, "/v1/completions answered without choices"
    if len(token_logprobs) < 2:
        return False, "the server ignores echo/logprobs on /v1/completions (no prompt logprobs returned)"
    return True, "ok"


def _completions_model(base_url: str, model: str, model_dir: str | Path, eval_cfg: EvalGroup):
    """lm-eval's client of /v1/completions, for loglikelihood tasks (prompt logprobs through echo)."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    return LocalCompletionsAPI(
        base_url=f"{api_root(base_url)}/v1/completions",
        model=model,
        tokenizer_backend="huggingface",
        tokenizer=str(model_dir),
        trust_remote_code=True,
        num_concurrent=eval_cfg.num_concurrent,
        max_retries=1 + eval_cfg.retries,
        timeout=int(eval_cfg.timeout_s),
    )


def _task_metrics(results: dict, name: str) -> dict:
    """Flat metrics of one standard task (its subtasks prefixed by their names), stderr left out."""
    metrics = {}
    for task_name, values in results["results"].items():
        for key, value in values.items():
            if isinstance(value, (int, float)) and "_stderr" not in key and "," in key:
                metrics[f"{task_name}.{key.split(',')[0]}" if task_name != name else key.split(",")[0]] = value
    return metrics


def run_standard_tasks(base_url: str, model: str, model_dir: str | Path, eval_cfg: EvalGroup, api: str) -> dict:
    """eval.tasks (names of lm-eval tasks): generation tasks via chat completions, loglikelihood via completions.

    Returns {task: {"status": "ok", "metrics": {...}} | {"status": "skipped", "reason": ...}}.
    """
    names = eval_cfg.tasks
    if not names:
        return {}
    _quiet_lm_eval()
    manager = _standard_task_manager()
    out: dict[str, dict] = {}
    echo_ok: tuple[bool, str] | None = None
    for name in names:
        try:
            loaded = manager.load([name])
        except Exception as exc:  # noqa: BLE001 - unknown task or its dataset unreachable: report, go on
            out[name] = {"status": "skipped", "reason": f"lm-eval could not load it: {exc}"}
            log.warning("standard task %s skipped: %s", name, exc)
            continue
        if all(t.get_config("output_type") == "generate_until" for t in loaded["tasks"].values()):
            lm, kwargs = _chat_model(base_url, model, eval_cfg), {"apply_chat_template": True}
        else:
            echo_ok = echo_ok or supports_echo_logprobs(base_url, model, eval_cfg.timeout_s)
            if not echo_ok[0]:
                reason = (
                    f"loglikelihood task needs prompt logprobs (echo) from /v1/completions, which this engine "
                    f"({api}) does not give: {echo_ok[1]}; run it against SGLang, or pick a generation task"
                )
                out[name] = {"status": "skipped", "reason": reason}
                log.warning("standard task %s skipped: %s", name, reason)
                continue
            lm, kwargs = _completions_model(base_url, model, model_dir, eval_cfg), {}
        results = evaluate_tasks(lm, loaded, limit=eval_cfg.standard_limit, log_samples=False, **kwargs)
        out[name] = {"status": "ok", "metrics": _task_metrics(results, name)}
    return out
