#!/usr/bin/env bash
# SOAR Lab's whole pipeline through SGLang on the GPU, as a user runs it (docs/PERFORMANCE.md
# "A sweep on the GPU" and "One server per experiment and JIT caches"):
#   `soarlab sweep SWEEP`: one `dvc exp run --temp -S ...` per trial, scores in MLflow. The first trial runs
#   every stage; each later one changes a serving flag only, so its time (sweep.log stamps each trial's
#   end) is the time from `dvc exp run -S <serving flag>` to reports/score.json with the JIT caches warm.
# The model is the small Llama of models.py (SGLang 0.5.17 cannot serve MiniCPM-SALA's shape).
#   bash scripts/gpu/pipeline_check.sh PROJECT OUT
# PROJECT: a copy of the checkout's files (no .git needed: this makes the git repo DVC needs); OUT: results.
# Environment: PY (default python3), BASE (what every trial gets), SIZE (its bench and accuracy sizes),
# SWEEP, GIT_DEB (git's .deb, for a host without git). run.sh runs it as the step `pipeline`, with the packs on PYTHONPATH. On a CPU,
# BASE="engine=transformers" (or engine=external) rehearses all of it but SGLang (scripts/README.md).
# SPEC=1 measures speculative decoding instead (docs/PERFORMANCE.md "Speculative decoding on a GPU"): the small
# Llama and a draft for it are trained here (spec_models.py), and SWEEP is spec=none,standalone,ngram with that draft.
# PRUNING=1 measures pruning instead (docs/PERFORMANCE.md "Pruning on the GPU"): one `dvc exp run` of BASE
# first (upstream stages cached, JIT warm), then SWEEP twice in this one project, without and with
# sweep.prune=true. eval.retries (1 and 2: a retry is only made for a failed request) tells the two
# sweeps' evaluate apart, so neither restores the other's from DVC's run cache. results.json then
# holds each trial's GPU-seconds (the trial holds its GPU lease from start to end) and their sum until
# each sweep's best trial had finished.
set -euo pipefail
SRC=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-$(command -v python3)}
WORK=${WORK:-/tmp/soarlab_pipeline}
MODEL=$WORK/small_llama
# engine.python: SGLang is imported from the packs on PYTHONPATH, by this Python (no .venv-sglang here)
BASE=${BASE:-"engine=sglang engine.python=$PY engine.server_args.attention-backend=triton engine.server_args.dense-as-sparse=false
  +engine.server_args.cuda-graph-max-bs=8 +engine.server_args.mem-fraction-static=0.5"}
SIZE=${SIZE:-"bench.dataset.num_requests=4 eval.limit=4"}  # how much each trial's bench and accuracy run
BASE="model.source=local model.local_path=$MODEL quant=none $SIZE $BASE"
if [ -n "${SPEC:-}" ]; then
  BASE="$BASE spec.draft.source=local spec.draft.local_path=$WORK/small_llama_draft"
  SWEEP=${SWEEP:-"spec=none,standalone,ngram"}
fi
SWEEP=${SWEEP:-"+engine.server_args.kv-cache-dtype=auto,fp8_e4m3,fp8_e5m2"}

# `soarlab` and `dvc` as the stages' commands call them; each stage imports the src/ of the workspace
# it runs in (DVC runs trials in temporary copies of the project).
mkdir -p "$WORK/bin"
printf '#!/usr/bin/env bash\nexport PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"\nexec %s -m soarlab.cli "$@"\n' "$PY" > "$WORK/bin/soarlab"
printf '#!/usr/bin/env bash\nexec %s -m dvc "$@"\n' "$PY" > "$WORK/bin/dvc"
chmod +x "$WORK/bin/soarlab" "$WORK/bin/dvc"
# The GPU host may be offline: no hub lookups, no DVC usage reports.
export HF_HUB_OFFLINE=1 DVC_NO_ANALYTICS=1
export PATH=$WORK/bin:$PATH GIT_AUTHOR_NAME=soarlab GIT_AUTHOR_EMAIL=soarlab@localhost
export GIT_COMMITTER_NAME=soarlab GIT_COMMITTER_EMAIL=soarlab@localhost
if ! command -v git > /dev/null; then  # DVC experiments need git: the .deb pack.sh adds, for a host without
  [ -f "${GIT_DEB:-}" ] || { echo "git is not on PATH and GIT_DEB names no git .deb: DVC experiments need git"; exit 1; }
  dpkg -x "$GIT_DEB" "$WORK/git"
  export PATH=$WORK/git/usr/bin:$PATH GIT_EXEC_PATH=$WORK/git/usr/lib/git-core GIT_TEMPLATE_DIR=$WORK/git/usr/share/git-core/templates
fi
git --version

t0=$(date +%s)
# The checkout's files, less its git history, venv, packs and outputs
rm -rf "$WORK/project" && mkdir -p "$WORK/project"
(cd "$SRC" && tar cf - --exclude=./.git --exclude=./.venv --exclude=./.gpu --exclude=./gpu-results .) | tar xf - -C "$WORK/project"
cd "$WORK/project"
rm -rf .git models data reports sweeps mlflow.db mlartifacts
if [ -n "${SPEC:-}" ]; then  # trained once: a pair already in WORK (an earlier step's) is kept
  [ -f "$WORK/small_llama_draft/config.json" ] ||
    PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$HERE/spec_models.py" "$MODEL" "$WORK/small_llama_draft"
else
  PYTHONPATH="$HERE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
    "import sys; from pathlib import Path; from models import write_small_llama; write_small_llama(Path(sys.argv[1]))" "$MODEL"
fi
# A fresh project has no outputs: the committed dvc.lock names the tiny model's, which this cache lacks.
git init -q -b main && rm -f dvc.lock && git add -A && git commit -qm "pipeline check" && echo "project ready in $(( $(date +%s) - t0 )) s"

collect() {  # also when the step's time limit stops this: what finished comes back
  dvc exp show --json > "$OUT/exp_show.json" 2> /dev/null || true
  cp -r sweeps mlflow.db "$OUT/" 2> /dev/null || true
}
trap collect EXIT
stamped() { while IFS= read -r line; do printf '%(%T)T %s\n' -1 "$line"; done; }  # when each trial ended

sweep() {  # NAME OVERRIDE...: one sweep of SWEEP on BASE, each trial's end stamped
  local name=$1 t1; shift; t1=$(date +%s)
  # shellcheck disable=SC2086  # the override lists are word lists
  soarlab sweep --name "$name" $BASE "$@" $SWEEP 2>&1 | stamped | tee "$OUT/$name.log" || echo "the sweep exited with $?"
  echo "SWEEP $name wall_s=$(( $(date +%s) - t1 ))" | tee -a "$OUT/times.txt"
}
if [ -z "${PRUNING:-}" ]; then
  sweep gpu
else
  t1=$(date +%s)
  # shellcheck disable=SC2046,SC2086
  dvc exp run --temp -n warm $(printf -- '-S %s ' $BASE) > "$OUT/warm.log" 2>&1 || echo "the warm-up run exited with $?"
  echo "WARM wall_s=$(( $(date +%s) - t1 ))" | tee -a "$OUT/times.txt"
  sweep plain eval.retries=1
  sweep pruned eval.retries=2 sweep.prune=true
fi

collect && trap - EXIT
# results.json: the wall times, what MLflow holds per run, and per sweep its trials' GPU-seconds
"$PY" - "$OUT" <<'EOF'
import json, sqlite3, sys
out = sys.argv[1]
con = sqlite3.connect(f"{out}/mlflow.db")
rows = con.execute("select r.name, m.key, m.value from runs r join latest_metrics m on m.run_uuid = r.run_uuid "
                   "where m.key like '%final' or m.key like '%performance' or m.key like '%duration_s' "
                   "or m.key like '%spec_accept%' or m.key like 'lossless.%' "
                   "order by r.start_time, m.key").fetchall()
tags = {}
for run, key, value in con.execute("select run_uuid, key, value from tags"):
    tags.setdefault(run, {})[key] = value
sweeps = {}
for parent, t in tags.items():
    if t.get("soarlab.role") != "sweep":
        continue
    trials = sorted((c for c in tags.values() if c.get("mlflow.parentRunId") == parent and "soarlab.trial_started" in c),
                    key=lambda c: float(c["soarlab.trial_started"]))
    best = tags.get(t.get("soarlab.best_run_id", ""))
    seconds, to_best = [], None
    for c in trials:
        seconds.append(round(float(c["soarlab.trial_ended"]) - float(c["soarlab.trial_started"]), 1))
        if c is best:
            to_best = round(sum(seconds), 1)
    sweeps[t["soarlab.sweep"]] = {
        "trials": [{"overrides": json.loads(c["soarlab.trial"]), "gpu_s": s, "pruned": c.get("soarlab.pruned")}
                   for c, s in zip(trials, seconds)],
        "gpu_s": round(sum(seconds), 1), "gpu_s_to_best": to_best, "best": t.get("soarlab.best_overrides")}
times = open(f"{out}/times.txt").read().splitlines()
json.dump({"times": times, "sweeps": sweeps, "mlflow": rows}, open(f"{out}/results.json", "w"), indent=1)
print("SUMMARY", json.dumps(times), json.dumps({k: (v["gpu_s"], v["gpu_s_to_best"], v["best"]) for k, v in sweeps.items()})[:600])
EOF
