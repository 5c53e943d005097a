#!/usr/bin/env bash
# One command on a fresh clone: a working local Argus and a demo task through the queue.
#
#   scripts/quickstart.sh          bring everything up, run the demo task, leave it running
#   scripts/quickstart.sh down     stop the service (and its supervisord) and every Ray node it started
#   scripts/quickstart.sh head-fault   on the running quick start: a 60-step run whose head
#                                  GCS is SIGKILLed at step 5 by scripts/fault_kill_head_ray.sh;
#                                  exit 0 only if it ends SUCCEEDED on attempt 1, every
#                                  step once
#
# What "up" does, with the same code paths as production:
#   1. scripts/bootstrap.sh (virtualenv + Debian tools),
#   2. `argus-node local up`: a Ray head (0 CPU, 0 GPU) and 2 workers (4 fake GPUs, 16 CPUs,
#      worker_node=100 each), every node its own supervisord + watchdogs, found through
#      head.json on the local "shared storage" (.argus/quickstart/shared),
#   3. scripts/20_start_api.sh --local: argus-api on SQLite under that shared root, under a
#      supervisord of its own that restarts it when it exits (its
#      webhooks may call this host: 127.0.0.0/8 allowed), and examples/*.yaml with that
#      root in place of @SHARED@ in <dir>/examples/, ready to submit,
#   4. submits examples/demo-ppo.yaml (a 1x4 PPO JobSpec whose code_path is the verl
#      stand-in in examples/standin-verl: no GPU software needed) and follows it
#      QUEUED -> SUBMITTED -> RUNNING -> SUCCEEDED, and prints the web console's address
#      of the task (sign in there with the API token).
# Environment: ARGUS_QUICKSTART_DIR (default .argus/quickstart), ARGUS_API_PORT (8080),
# ARGUS_API_TOKEN (generated and kept in <dir>/api-token when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
STATE=${ARGUS_QUICKSTART_DIR:-$REPO/.argus/quickstart}
case $STATE in /*) ;; *) STATE=$REPO/$STATE ;; esac
SHARED=$STATE/shared
PORT=${ARGUS_API_PORT:-8080}
NODE=$REPO/.venv/bin/argus-node
ARGUS=$REPO/.venv/bin/argus

api_env() {
    export ARGUS_SHARED_ROOT=$SHARED ARGUS_CONFIG=$STATE/argus.yaml
    export ARGUS_API_HOST=127.0.0.1 ARGUS_API_PORT=$PORT
    export ARGUS_URL=http://127.0.0.1:$PORT
}

down() {
    api_env
    if [ -f "$STATE/argus.yaml" ]; then
        scripts/21_stop_api.sh --local || true
    fi
    if [ -f "$STATE/local.json" ]; then
        "$NODE" local down --state-dir "$STATE"
    fi
    echo "quickstart: stopped"
}

# A run survives a head fault: the quick start's own head GCS SIGKILLed under a running
# task through the project's fault script; the task must end SUCCEEDED on attempt 1 with
# every step logged exactly once (no restarted driver, no second attempt).
head_fault() {
    if [ ! -f "$STATE/local.json" ] || [ ! -f "$STATE/argus.yaml" ]; then
        echo "quickstart: nothing runs in $STATE (scripts/quickstart.sh first)" >&2
        exit 2
    fi
    if [ -z "${ARGUS_API_TOKEN:-}" ]; then
        ARGUS_API_TOKEN=$(cat "$STATE/api-token")
        export ARGUS_API_TOKEN
    fi
    api_env
    local steps=60 task deadline
    sed -e "s#@SHARED@#$SHARED#g" -e "s#^total_training_steps: .*#total_training_steps: $steps#" \
        -e "s#^save_freq: .*#save_freq: 1#" -e "s#^n_gpus_per_node: .*#n_gpus_per_node: 1#" \
        -e "s#duration_s=[0-9]*#duration_s=$steps#" examples/demo-ppo.yaml > "$STATE/head-fault.yaml"
    task=$("$ARGUS" --json submit "$STATE/head-fault.yaml" |
        "$REPO/.venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["task_id"])')
    echo "== head fault: task $task ($steps steps, one a second); the GCS is killed at step 5"
    deadline=$((SECONDS + 180))
    # grep without -q: under pipefail its early exit would fail the pipeline (SIGPIPE)
    until "$ARGUS" logs "$task" --tail 50 2>/dev/null | grep '\] step:5 - ' >/dev/null; do
        ((SECONDS < deadline)) || { echo "quickstart: $task never reached step 5" >&2; exit 1; }
        sleep 0.5
    done
    ARGUS_LOCAL_DIR=$STATE ARGUS_NODE=$NODE scripts/fault_kill_head_ray.sh local head
    local status=0
    "$ARGUS" wait "$task" --timeout 300 --interval 1 || status=$?
    echo
    "$ARGUS" events "$task"
    echo
    "$ARGUS" attempts "$task"
    [ "$status" -eq 0 ] || { echo "quickstart: $task did not succeed" >&2; exit "$status"; }
    "$ARGUS" --json attempts "$task" | "$REPO/.venv/bin/python" -c '
import json, sys
attempts = [a["attempt_no"] for a in json.load(sys.stdin)["attempts"]]
sys.exit(0 if attempts == [1] else f"quickstart: attempts {attempts}, not [1]")'
    "$ARGUS" logs "$task" --attempt 1 --tail 100000 | "$REPO/.venv/bin/python" -c '
import re, sys
steps = [int(s) for s in re.findall(r"\] step:(\d+) - ", sys.stdin.read())]
want = list(range(1, int(sys.argv[1]) + 1))
sys.exit(0 if steps == want else f"quickstart: steps {steps}, not 1..{want[-1]} once each")' "$steps"
    echo "quickstart: $task survived the head's GCS kill: SUCCEEDED on attempt 1, every step once"
}

case "${1:-up}" in
    up) ;;
    down)
        down
        exit 0
        ;;
    head-fault)
        head_fault
        exit 0
        ;;
    *)
        echo "usage: $0 [up|down|head-fault]" >&2
        exit 2
        ;;
esac

scripts/bootstrap.sh
if [ -f "$STATE/local.json" ]; then
    echo "quickstart: a previous run is still up in $STATE; stopping it first"
    down
fi
mkdir -p "$STATE"

# The nodes run job drivers with `python3` from their PATH: make it this project's Python,
# as the image's base provides Python with Ray on a real node.
export PATH=$REPO/.venv/bin:$PATH
echo "== 1/4 Ray head + 2 workers through the node runtime (supervisord + watchdogs)"
"$NODE" local up --state-dir "$STATE" --workers 2 --isolation ports --gpus 4 --cpus 16
read -r JOB_URL GCS HEAD_FILE < <("$REPO/.venv/bin/python" - "$STATE/local.json" <<'PY'
import json, sys
state = json.load(open(sys.argv[1]))
print(state["job_server_url"], state["gcs_address"], state["head_file"])
PY
)
echo "   job server $JOB_URL, GCS $GCS, published in $HEAD_FILE"

echo "== 2/4 argus-api on SQLite"
mkdir -p "$SHARED/code"
rm -rf "$SHARED/code/standin-verl"
cp -R examples/standin-verl "$SHARED/code/standin-verl"
# the examples as a reader submits them: this shared root in place of @SHARED@
mkdir -p "$STATE/examples"
for example in examples/*.yaml; do
    sed "s#@SHARED@#$SHARED#g" "$example" > "$STATE/examples/${example##*/}"
done
cat > "$STATE/argus.yaml" <<YAML
ray:
  # the service finds Ray the way workers do, and follows a restarted or moved head
  head_json: "$HEAD_FILE"
  shared_root: "$SHARED"
  entrypoint_num_cpus: 1
  entrypoint_resources: {worker_node: 1}
  runtime_env: {env_vars: {PYTHONUNBUFFERED: "1"}}
v2:
  api: {host: 127.0.0.1, port: $PORT}
  auth: {token_env: ARGUS_API_TOKEN}
  scheduler: {tick_s: 1, retry_interval_s: 60}
  progress: {poll_s: 1}   # the demo's steps are a second apart
  webhooks: {allow_networks: ["127.0.0.0/8"]}   # a receiver on this host
YAML
if [ -z "${ARGUS_API_TOKEN:-}" ]; then
    if [ ! -s "$STATE/api-token" ]; then
        (umask 077 && "$REPO/.venv/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))' \
            > "$STATE/api-token")
    fi
    ARGUS_API_TOKEN=$(cat "$STATE/api-token")
fi
export ARGUS_API_TOKEN
api_env
scripts/20_start_api.sh --local

echo "== 3/4 submit the demo task (examples/demo-ppo.yaml, verl stand-in, 1x4 fake GPUs)"
TASK=$("$ARGUS" --json submit "$STATE/examples/demo-ppo.yaml" |
    "$REPO/.venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["task_id"])')
echo "   task $TASK"

echo "== 4/4 follow it to the end"
status=0
"$ARGUS" wait "$TASK" --timeout 300 --interval 1 || status=$?
echo
"$ARGUS" events "$TASK"
echo
"$ARGUS" attempts "$TASK"
echo
echo "-- driver log (tail)"
"$ARGUS" logs "$TASK" --tail 8 || true
echo
if [ "$status" -ne 0 ]; then
    echo "quickstart: the demo task did not succeed (see above)" >&2
    exit "$status"
fi
if [ -s "$STATE/api-token" ] && [ "$(cat "$STATE/api-token")" = "$ARGUS_API_TOKEN" ]; then
    SIGN_IN="the token in $STATE/api-token"
else
    SIGN_IN="your ARGUS_API_TOKEN"
fi
cat <<DONE
quickstart: Argus is up.
  web console: $ARGUS_URL/ui/tasks/$TASK   (the demo task's whole life; queue: $ARGUS_URL/ui/)
               sign in with $SIGN_IN
  export ARGUS_URL=$ARGUS_URL ARGUS_API_TOKEN=\$(cat $STATE/api-token)   # the admin's token
  .venv/bin/argus queue    .venv/bin/argus submit FILE    .venv/bin/argus status ID
  examples, ready to submit: $STATE/examples/ (argus pipeline submit FILE for the pipeline)
  users: .venv/bin/argus user create alice   # prints alice's token once: she exports it as
         ARGUS_API_TOKEN and submits as herself (.venv/bin/argus me, argus usage)
  Ray dashboard: $JOB_URL      stop everything: scripts/quickstart.sh down
DONE
