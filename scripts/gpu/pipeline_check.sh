#!/usr/bin/env bash
# SOAR Lab's whole pipeline through SGLang on the GPU, as a user runs it (docs/PERFORMANCE.md
# "A sweep on the GPU" and "One server per experiment and JIT caches"):
#   `soarlab sweep SWEEP`: one `dvc exp run --temp -S ...` per trial, scores in MLflow. The first trial runs
#   every stage; each later one changes a serving flag only, so its time (sweep.log stamps each trial's
#   end) is the time from `dvc exp run -S <serving flag>` to reports/score.json with the JIT caches warm.
# The model is the small Llama of models.py (SGLang 0.5.17 cannot serve MiniCPM-SALA's shape).
#   bash scripts/gpu/pipeline_check.sh PROJECT OUT
# PROJECT: a copy of the checkout's files (no .git needed: this makes the git repo DVC needs); OUT: results.
# Environment: PY (default python3), BASE (what every trial gets), SWEEP, GIT_DEB (git's .deb, for a
# host without git). run.sh runs it as the step `pipeline`, with the packs on PYTHONPATH. On a CPU,
# BASE="engine=transformers" (or engine=external) rehearses all of it but SGLang (scripts/README.md).
set -euo pipefail
SRC=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-$(command -v python3)}
WORK=${WORK:-/tmp/soarlab_pipeline}
MODEL=$WORK/small_llama
BASE=${BASE:-"engine=sglang engine.server_args.attention-backend=triton engine.server_args.dense-as-sparse=false
  +engine.server_args.cuda-graph-max-bs=8 +engine.server_args.mem-fraction-static=0.5"}
BASE="model.source=local model.local_path=$MODEL quant=none bench.dataset.num_requests=4 eval.limit=4 $BASE"
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
PYTHONPATH="$HERE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
  "import sys; from pathlib import Path; from models import write_small_llama; write_small_llama(Path(sys.argv[1]))" "$MODEL"
# A fresh project has no outputs: the committed dvc.lock names the tiny model's, which this cache lacks.
git init -q -b main && rm -f dvc.lock && git add -A && git commit -qm "pipeline check" && echo "project ready in $(( $(date +%s) - t0 )) s"

collect() {  # also when the step's time limit stops this: what finished comes back
  dvc exp show --json > "$OUT/exp_show.json" 2> /dev/null || true
  cp -r sweeps mlflow.db "$OUT/" 2> /dev/null || true
}
trap collect EXIT
stamped() { while IFS= read -r line; do printf '%(%T)T %s\n' -1 "$line"; done; }  # when each trial ended

t1=$(date +%s)
# shellcheck disable=SC2086  # the override lists are word lists
soarlab sweep --name gpu $BASE $SWEEP 2>&1 | stamped | tee "$OUT/sweep.log" || echo "the sweep exited with $?"
echo "SWEEP wall_s=$(( $(date +%s) - t1 ))" | tee -a "$OUT/times.txt"

collect && trap - EXIT
# results.json: the wall times and what MLflow holds per run
"$PY" - "$OUT" <<'EOF'
import json, sqlite3, sys
out = sys.argv[1]
con = sqlite3.connect(f"{out}/mlflow.db")
rows = con.execute("select r.name, m.key, m.value from runs r join latest_metrics m on m.run_uuid = r.run_uuid "
                   "where m.key like '%final' or m.key like '%performance' or m.key like '%duration_s' "
                   "order by r.start_time, m.key").fetchall()
times = open(f"{out}/times.txt").read().splitlines()
json.dump({"times": times, "mlflow": rows}, open(f"{out}/results.json", "w"), indent=1)
print("SUMMARY", json.dumps(times), json.dumps([r for r in rows if r[1].endswith("final")])[:400])
EOF
