#!/usr/bin/env bash
# Run the README as a newcomer would, on a fresh Debian: a clean clone of this repository's HEAD in a
# fresh bookworm container made from the project's own mmdebstrap base (nothing else installed), then
# the container path on the host. One line per step (ok or the error, and its time); exits non-zero
# on any failure.
#
#   sudo bash scripts/newcomer.sh            # as root, on a Debian host with podman and mmdebstrap
#                                            # (bash scripts/setup.sh installs both); 24-52 min on 2 cores
#
# What may come from the host, as a newcomer's machine has them: the package-index settings (pip's config,
# the folders its find-links and file:// indexes name, apt's sources) and the CA bundle. Nothing else
# does: pip's cache starts empty, and there is no venv, DVC cache, installed package or model.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${NEWCOMER_BASE:-localhost/debian-base:bookworm}
WORK=$(mktemp -d /tmp/soarlab-newcomer.XXXXXX)
NAME=soarlab-newcomer-$$
TABLE=$WORK/steps.tsv
failed=0

log() { printf '%s\n' "$*" >&2; }
step() {  # step NAME COMMAND...: run it, log to $WORK/NAME.log, print one line
    local name=$1; shift
    local t0=$SECONDS
    if "$@" >"$WORK/$name.log" 2>&1; then
        printf '%-28s ok    %5ss\n' "$name" $((SECONDS - t0)) | tee -a "$TABLE"
    else
        local why; why=$(grep -v '^\s*$' "$WORK/$name.log" | tail -1 | cut -c1-160)
        printf '%-28s FAIL  %5ss  %s (log %s)\n' "$name" $((SECONDS - t0)) "$why" "$WORK/$name.log" | tee -a "$TABLE"
        failed=1
        return 1
    fi
}
need() { step "$@" || { log "newcomer: stopped: the steps after $1 need it"; exit 1; }; }
in_clone() { podman exec -w "/home/newcomer/$1" "$NAME" bash -c "$2"; }  # in_clone soarlab|tests COMMAND
in_box() { in_clone soarlab "$1"; }
# Podman here as soarlab runs it (soarlab/container.py): runc, and ulimits at the host's hard limits.
export CONTAINERS_CONF=$WORK/containers.conf
nproc_limit=$(ulimit -Hu); pid_max=$(cut -d' ' -f1 /proc/sys/kernel/pid_max)
{ [ "$nproc_limit" = unlimited ] || [ "$nproc_limit" -gt "$pid_max" ]; } && nproc_limit=$pid_max
nofile_limit=$(ulimit -Hn); [ "$nofile_limit" = unlimited ] && nofile_limit=1048576
printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "runc"\n' \
    "$nofile_limit" "$nofile_limit" "$nproc_limit" "$nproc_limit" >"$CONTAINERS_CONF"
cleanup() { podman rm -f "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# The README's two commands, read from the README itself so that what runs is what it says.
readme_commands=$(bash "$ROOT/scripts/readme_commands.sh" 2>&1) || { log "newcomer: $readme_commands"; exit 2; }
mapfile -t README_COMMANDS <<<"$readme_commands"
command -v podman >/dev/null || { log "newcomer: error: podman is not installed. Fix: as root, bash scripts/setup.sh"; exit 2; }

base_image() {
    podman image exists "$BASE" && return 0
    local sources=/etc/apt/sources.list.d/debian.sources
    [ -s "$sources" ] || sources=/etc/apt/sources.list
    mmdebstrap --variant=minbase bookworm - "$sources" | podman import - "$BASE"
}
# Two clones: the README's test command runs in one the main command has not touched (its `dvc repro`
# rewrites dvc.lock, which would hide a stale committed one from the tests that check it).
clone() { for dir in soarlab tests; do git clone --quiet --no-local "$ROOT" "$WORK/$dir" || return 1; done; }
# Local files and folders the machine's pip settings name (find-links, file:// indexes, constraints); for
# an index (.../simple), the folder above it, where its pages' relative links to the files point.
pip_local_paths() {
    { python3 -m pip config list 2>/dev/null; env | grep -E '^(PIP|UV)_'; } \
        | grep -oE "(file://)?/[^ '\"]+" | sed -e 's|^file://||' -e 's|/simple/*$||' | sort -u
}
start_box() {
    local mounts=(-v "$WORK/soarlab:/home/newcomer/soarlab" -v "$WORK/tests:/home/newcomer/tests") path var
    # The machine's package-index settings as pip and uv read them: config files (the user's too), the
    # local folders they name, PIP_*/UV_* variables; its CA bundle. Not pip's cache: a newcomer has none.
    for path in /etc/pip.conf /etc/xdg/pip /etc/ssl/certs $(pip_local_paths); do
        [ -e "$path" ] && mounts+=(-v "$path:$path:ro")
    done
    path=${XDG_CONFIG_HOME:-$HOME/.config}/pip
    [ -d "$path" ] && mounts+=(-v "$path:/root/.config/pip:ro")
    for var in $(compgen -e | grep -E '^(PIP|UV)_'); do mounts+=(-e "$var=${!var}"); done
    for var in SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE; do  # uv, like curl, reads SSL_CERT_FILE
        [ -n "${!var:-}" ] && mounts+=(-e "$var=${!var}")
    done
    # Its own network namespace (its tests serve on loopback ports the host may use), privileged with its own
    # container storage: the test suite builds and runs the serving image inside.
    mkdir -p "$WORK/containers"
    podman run -d --name "$NAME" --privileged -v "$WORK/containers:/var/lib/containers" \
        -e PIP_DISABLE_PIP_VERSION_CHECK=1 "${mounts[@]}" "$BASE" sleep infinity >/dev/null
}
main_command() {  # the README's first command, and a valid score from it (every level benchmarked)
    in_box "${README_COMMANDS[0]}" && in_box "python3 -c \"import json; s = json.load(open('reports/score.json')); print(s); assert s['valid'] == 1\""
}
sweep() {  # every trial finished (a trial that fails is recorded and the sweep goes on, exit 0)
    in_box ". .venv/bin/activate && soarlab sweep quant=none,gptq_w8" >"$WORK/sweep.out" 2>&1; local code=$?
    cat "$WORK/sweep.out"; [ $code = 0 ] && ! grep -q FAILED "$WORK/sweep.out"
}
scores() {
    in_box ". .venv/bin/activate && dvc exp show --json" >"$WORK/exp.json" && python3 - "$WORK/exp.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
finals = []
for commit in rows:
    for exp in [commit] + [e for exps in (commit.get("experiments") or []) for e in exps.get("revs", [])]:
        metrics = ((exp.get("data") or {}).get("metrics") or {}).get("reports/score.json", {}).get("data", {})
        if "final" in metrics:
            finals.append(metrics["final"])
print(f"scores: {finals}")
sys.exit(0 if len(finals) >= 3 else 1)  # the main run and the two sweep trials
EOF
}
leaderboard() { in_box ". .venv/bin/activate && soarlab leaderboard --no-plot"; }
# The sweep's trials are new runs in the store: the first `dvc repro` after it re-runs reference, score and
# track (a faster recorded run moves the reference, so the score and its run are new). The second is the
# no-op: nothing changed but the store, by that run alone, so reference, score and track run once more for
# it (reference answers from what track remembered, without MLflow) and no run is logged.
noop_repro() {
    in_box 'runs() { .venv/bin/python -c "import mlflow; c = mlflow.MlflowClient(\"sqlite:///mlflow.db\"); print(len(c.search_runs([c.get_experiment_by_name(\"soarlab\").experiment_id])))"; }
            . .venv/bin/activate && dvc repro > /dev/null && before=$(runs) && dvc repro && after=$(runs)
            echo "runs before $before, after $after"; [ "$before" = "$after" ]'
}
# On the host, in the clone the container set up: the serving image built and started. The host gets an
# environment of its own, outside the clone (the container's .venv is for the container's Python).
host_setup() { python3.11 -m venv "$WORK/host-venv" && "$WORK/host-venv/bin/pip" install -q "torch==2.13.0" \
                 && "$WORK/host-venv/bin/pip" install -q -e "$WORK/soarlab"; }
host_container() {
    (cd "$WORK/soarlab" && . "$WORK/host-venv/bin/activate" && dvc exp run -S engine.launcher=container \
        && python3 -c "import json; m = json.load(open('reports/package/metrics.json')); print(m); assert m['image_bytes']")
}

log "newcomer: working in $WORK (kept afterwards: logs, the clone)"
need base-image base_image
need clone clone
need start-container start_box
need readme-main-command main_command
step readme-test-command in_clone tests "${README_COMMANDS[1]}"
step sweep sweep
step dvc-exp-show scores
step leaderboard leaderboard
step noop-dvc-repro noop_repro
need host-setup host_setup
step host-container-launcher host_container
echo "newcomer: $(grep -c ' ok ' "$TABLE") of $(wc -l <"$TABLE") steps ok; logs in $WORK"
exit $failed
