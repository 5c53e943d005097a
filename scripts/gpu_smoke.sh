#!/usr/bin/env bash
# Real verl on a GPU host: one tiny SFT training run submitted through the Argus API,
# admitted, run on Ray by verl 0.9.1's sft_trainer_ray, followed to its end.
#
#   scripts/gpu_smoke.sh          install what is missing, run, print the report, stop
#                                 everything it started (exit 0 only if the task SUCCEEDED
#                                 and logged at least one training step)
#   scripts/gpu_smoke.sh down     stop what an interrupted or ARGUS_SMOKE_KEEP=1 run left
#
# Needs a Python with CUDA PyTorch (ARGUS_SMOKE_PYTHON, default python3); no Docker, no
# root. What it does, with the project's own code paths:
#   1. a virtualenv (<dir>/venv) layered over that Python's packages (its CUDA torch is
#      used, never replaced), with scripts/gpu-smoke-requirements.txt and verl==0.9.1 put
#      in from PyPI or, offline, from the wheels in ARGUS_SMOKE_WHEELHOUSE;
#   2. tiny assets: scripts/make_tiny_sft_assets.py (a 100k-parameter Qwen2, 48/16 chats);
#   3. `argus-node local up`: a Ray head with 0 CPUs/GPUs and one worker with the host's
#      GPUs, each under its own supervisord + watchdogs (as scripts/quickstart.sh does);
#   4. argus-api on SQLite (scripts/20_start_api.sh --local);
#   5. `argus submit` of examples/sft-tiny.yaml (workload sft, trainer_device cuda), then
#      `argus wait`, and the report: the task's events and attempts, verl's `step:N` lines
#      and the driver log, nvidia-smi (and its samples taken while the task ran).
# The report stays in <dir>/report/ after everything is stopped.
#
# Environment:
#   ARGUS_SMOKE_PYTHON      Python with CUDA PyTorch (default python3)
#   ARGUS_SMOKE_WHEELHOUSE  install offline from this directory of wheels (pip --no-index);
#                           scripts/gpu-smoke-requirements.txt says how to fill it
#   ARGUS_SMOKE_INSTALL=0   install nothing: the Python already has Ray, verl and the rest
#                           (in its site-packages or on PYTHONPATH); step 1 still checks
#                           that the driver's and the workers' imports work
#   ARGUS_SMOKE_DIR         state, venv, shared root and report (default .argus/gpu-smoke)
#   ARGUS_SMOKE_GPUS        GPUs the worker node offers (default: all CUDA devices); set on
#                           a host without CUDA to rehearse with fake GPUs (verl then fails)
#   ARGUS_SMOKE_TASK_GPUS   the task's n_gpus_per_node (default 1)
#   ARGUS_SMOKE_CPUS        CPUs the worker offers (default: cores, at least 10 per GPU + 2:
#                           verl's SFT trainer asks for 10 CPUs with every GPU)
#   ARGUS_SMOKE_TIMEOUT_S   how long to wait for the task (default 1200)
#   ARGUS_SMOKE_KEEP=1      leave the cluster and the service running (stop: `down`)
#   ARGUS_API_PORT          the service's port (default 18080)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
STATE=${ARGUS_SMOKE_DIR:-$REPO/.argus/gpu-smoke}
case $STATE in /*) ;; *) STATE=$REPO/$STATE ;; esac
SHARED=$STATE/shared
VENV=$STATE/venv
VPY=$VENV/bin/python
REPORT=$STATE/report
PORT=${ARGUS_API_PORT:-18080}
HOST_PY=${ARGUS_SMOKE_PYTHON:-python3}
TIMEOUT_S=${ARGUS_SMOKE_TIMEOUT_S:-1200}
VERL=verl==0.9.1
# verl's Ray SFT trainer places one bundle of {"CPU": 10, "GPU": 1} per GPU
# (RayResourcePool's default max_colocate_count): admission must count the same.
SFT_CPUS_PER_GPU=10

say() { printf '== %s\n' "$*"; }
die() {
    echo "gpu_smoke: $*" >&2
    exit 2
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

api_env() {
    export ARGUS_SHARED_ROOT=$SHARED ARGUS_CONFIG=$STATE/argus.yaml
    export ARGUS_API_HOST=127.0.0.1 ARGUS_API_PORT=$PORT
    export ARGUS_URL=http://127.0.0.1:$PORT
    export PATH=$VENV/bin:$PATH
}

SAMPLER_PID=
down() {
    api_env
    if [ -n "$SAMPLER_PID" ]; then
        kill "$SAMPLER_PID" 2>/dev/null || true
        wait "$SAMPLER_PID" 2>/dev/null || true
        SAMPLER_PID=
    fi
    if [ -f "$STATE/argus.yaml" ] && [ -x "$VPY" ]; then
        scripts/21_stop_api.sh --local || true
    fi
    if [ -f "$STATE/local.json" ] && [ -x "$VPY" ]; then
        "$VPY" -m raypool.cli local down --state-dir "$STATE" || true
    fi
}

case "${1:-run}" in
    run) ;;
    down)
        down
        echo "gpu_smoke: stopped"
        exit 0
        ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *) die "usage: $0 [run|down]" ;;
esac
for name in ARGUS_SMOKE_TIMEOUT_S ARGUS_SMOKE_TASK_GPUS ARGUS_SMOKE_GPUS ARGUS_SMOKE_CPUS \
    ARGUS_API_PORT; do
    value=${!name:-}
    [[ -z $value || $value =~ ^[0-9]+$ ]] || die "$name must be a whole number, got '$value'"
done
case ${ARGUS_SMOKE_INSTALL:-1} in
    0 | 1) ;;
    *) die "ARGUS_SMOKE_INSTALL must be 0 or 1, got '$ARGUS_SMOKE_INSTALL'" ;;
esac
if [ -n "${ARGUS_SMOKE_WHEELHOUSE:-}" ] && [ ! -d "$ARGUS_SMOKE_WHEELHOUSE" ]; then
    die "ARGUS_SMOKE_WHEELHOUSE=$ARGUS_SMOKE_WHEELHOUSE is not a directory"
fi
command -v "$HOST_PY" >/dev/null 2>&1 || die "no Python '$HOST_PY' (set ARGUS_SMOKE_PYTHON)"
if [ -f "$STATE/local.json" ]; then
    say "a previous run is still up in $STATE; stopping it first"
    down
fi
mkdir -p "$STATE" "$REPORT"
rm -f "$REPORT"/*
T0=$(now)

say "1/5 Python environment ($VENV over $HOST_PY)"
if [ ! -x "$VPY" ]; then
    # No pip of its own (the base interpreter may lack ensurepip): the host's pip, seen
    # through the .pth below, installs into this prefix.
    "$HOST_PY" -m venv --without-pip "$VENV"
fi
venv_site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The host's site-packages after the venv's own: what the venv installs wins, the rest
# (CUDA torch above all) comes from the host. addsitedir also runs the host's .pth files.
"$HOST_PY" - "$venv_site/argus-host-site.pth" <<'PY'
import site, sys
dirs = [d for d in site.getsitepackages() if d]
with open(sys.argv[1], "w") as out:
    out.writelines(f"import site; site.addsitedir({d!r})\n" for d in dirs)
PY
printf '%s\n' "$REPO" "$REPO/clients/python" >"$venv_site/argus-repo.pth"
for tool in argus:argus_client.cli argus-api:service.main argus-node:raypool.cli; do
    printf '#!/bin/sh\nexec "%s" -m %s "$@"\n' "$VPY" "${tool#*:}" >"$VENV/bin/${tool%%:*}"
    chmod +x "$VENV/bin/${tool%%:*}"
done
"$VPY" -c 'import torch' 2>/dev/null || die "$HOST_PY has no PyTorch (it must bring CUDA PyTorch)"
# The distribution's version (2.11.0), not torch.__version__ (2.11.0+cu130): pip
# matches constraints against the former.
TORCH=$("$VPY" -c 'import importlib.metadata as md; print(md.version("torch"))')
printf 'torch==%s\n' "$TORCH" >"$STATE/constraints.txt"
pip_source=()
if [ -n "${ARGUS_SMOKE_WHEELHOUSE:-}" ]; then
    pip_source=(--no-index --find-links "$ARGUS_SMOKE_WHEELHOUSE")
fi
T_PIP=$(now)
if [ "${ARGUS_SMOKE_INSTALL:-1}" != 0 ]; then
    "$VPY" -m pip install -q --disable-pip-version-check "${pip_source[@]}" \
        -c "$STATE/constraints.txt" -r scripts/gpu-smoke-requirements.txt
    "$VPY" -m pip install -q --disable-pip-version-check "${pip_source[@]}" --no-deps "$VERL"
fi
T_PIP_END=$(now)
# Entry points of packages the host already had (pip then installed no script here): the
# node runtime starts `ray` and `supervisord` next to its interpreter, which must be the
# venv's so that Ray's workers see what the venv installed.
for entry in ray:ray.scripts.scripts supervisord:supervisor.supervisord \
    supervisorctl:supervisor.supervisorctl; do
    if [ ! -x "$VENV/bin/${entry%%:*}" ]; then
        printf '#!/bin/sh\nexec "%s" -c %s "$@"\n' "$VPY" \
            "'import sys; from ${entry#*:} import main; sys.argv[0] = \"${entry%%:*}\"; sys.exit(main())'" \
            >"$VENV/bin/${entry%%:*}"
        chmod +x "$VENV/bin/${entry%%:*}"
    fi
done
"$VPY" - "${ARGUS_SMOKE_GPUS:-}" >"$REPORT/environment.txt" <<'PY'
import importlib.metadata as md
import platform, sys

import torch
# What the driver and the training workers import: fail here, not inside a Ray job.
import ray, supervisor, verl.trainer.sft_trainer_ray, verl.workers.engine.fsdp.transformer_impl  # noqa: F401

print(f"python {platform.python_version()} at {sys.executable}")
for name in ("torch", "ray", "verl", "transformers", "tensordict", "hydra-core"):
    print(f"{name} {md.version(name)}")
print(f"cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}, "
      f"torch cuda {torch.version.cuda}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"gpu {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB")
if not torch.cuda.is_available() and not sys.argv[1]:
    sys.exit("no CUDA device visible to this Python (set ARGUS_SMOKE_GPUS to rehearse "
             "with fake GPUs)")
PY
cat "$REPORT/environment.txt"
HOST_GPUS=${ARGUS_SMOKE_GPUS:-$("$VPY" -c 'import torch; print(torch.cuda.device_count())')}
TASK_GPUS=${ARGUS_SMOKE_TASK_GPUS:-1}
((TASK_GPUS >= 1 && TASK_GPUS <= HOST_GPUS)) ||
    die "the task wants $TASK_GPUS GPUs; the worker offers $HOST_GPUS"
CPUS=${ARGUS_SMOKE_CPUS:-$(nproc)}
((CPUS >= SFT_CPUS_PER_GPU * HOST_GPUS + 2)) || CPUS=$((SFT_CPUS_PER_GPU * HOST_GPUS + 2))

say "2/5 tiny assets under $SHARED"
if [ ! -f "$SHARED/models/tiny/config.json" ] || [ ! -f "$SHARED/datasets/sft_test.parquet" ]; then
    "$VPY" scripts/make_tiny_sft_assets.py "$SHARED"
fi
mkdir -p "$SHARED/code/verl-installed"

[ "${ARGUS_SMOKE_KEEP:-0}" = 1 ] || trap down EXIT
api_env
say "3/5 Ray head (0 CPU, 0 GPU) + 1 worker ($HOST_GPUS GPUs, $CPUS CPUs) via the node runtime"
T_UP=$(now)
"$VPY" -m raypool.cli local up --state-dir "$STATE" --workers 1 --isolation ports \
    --gpus "$HOST_GPUS" --cpus "$CPUS"
T_UP_END=$(now)
read -r JOB_URL GCS < <("$VPY" - "$STATE/local.json" <<'PY'
import json, sys
state = json.load(open(sys.argv[1]))
print(state["job_server_url"], state["gcs_address"])
PY
)

say "4/5 argus-api on SQLite"
cat >"$STATE/argus.yaml" <<YAML
ray:
  address: "$JOB_URL"
  gcs_address: "$GCS"
  shared_root: "$SHARED"
  entrypoint_num_cpus: 1
  entrypoint_resources: {worker_node: 1}
  runtime_env: {env_vars: {PYTHONUNBUFFERED: "1", HF_HUB_OFFLINE: "1"}}
v2:
  api: {host: 127.0.0.1, port: $PORT}
  auth: {token_env: ARGUS_API_TOKEN}
  scheduler: {tick_s: 1, retry_interval_s: 30, cpus_per_gpu: $SFT_CPUS_PER_GPU}
YAML
if [ -z "${ARGUS_API_TOKEN:-}" ]; then
    (umask 077 && "$VPY" -c 'import secrets; print(secrets.token_urlsafe(24))' >"$STATE/api-token")
    ARGUS_API_TOKEN=$(cat "$STATE/api-token")
fi
export ARGUS_API_TOKEN
scripts/20_start_api.sh --local

say "5/5 submit examples/sft-tiny.yaml (1x$TASK_GPUS GPU, trainer_device cuda) and follow it"
sed -e "s#@SHARED@#$SHARED#g" -e "s/^n_gpus_per_node: .*/n_gpus_per_node: $TASK_GPUS/" \
    examples/sft-tiny.yaml >"$STATE/sft-tiny.yaml"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi >"$REPORT/nvidia-smi.txt" 2>&1 || true
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total \
        --format=csv -l 1 >"$REPORT/gpu-samples.csv" 2>&1 &
    SAMPLER_PID=$!
fi
T_SUBMIT=$(now)
TASK=$(argus --json submit "$STATE/sft-tiny.yaml" |
    "$VPY" -c 'import json, sys; print(json.load(sys.stdin)["task_id"])')
echo "   task $TASK"
status=0
argus wait "$TASK" --timeout "$TIMEOUT_S" --interval 1 || status=$?
T_END=$(now)
if [ -n "$SAMPLER_PID" ]; then
    kill "$SAMPLER_PID" 2>/dev/null || true
    wait "$SAMPLER_PID" 2>/dev/null || true
    SAMPLER_PID=
fi

argus events "$TASK" >"$REPORT/events.txt" || true
argus attempts "$TASK" >"$REPORT/attempts.txt" || true
argus logs "$TASK" --tail 20000 >"$REPORT/driver.log" 2>&1 || true
# verl's console logger prints `step:N - key:value - ...`; tqdm's progress bar (no newline,
# same stream) may sit in front of it on the line.
grep -oE 'step:[0-9]+ - .*' "$REPORT/driver.log" >"$REPORT/steps.txt" || true
steps=$(grep -c 'train/loss:' "$REPORT/steps.txt" || true)
{
    echo "install (pip): $(elapsed "$T_PIP" "$T_PIP_END") s"
    echo "cluster up: $(elapsed "$T_UP" "$T_UP_END") s"
    echo "submit -> end: $(elapsed "$T_SUBMIT" "$T_END") s"
    echo "whole run so far: $(elapsed "$T0" "$T_END") s"
    echo "training steps logged (train/loss): $steps"
    if [ -s "$REPORT/gpu-samples.csv" ]; then
        awk -F', ' 'NR > 1 && $4 + 0 > max { max = $4 + 0 } END {
            printf "peak GPU memory used (nvidia-smi, 1 s samples): %d MiB\n", max }' \
            "$REPORT/gpu-samples.csv"
    fi
} >"$REPORT/timings.txt"

echo
cat "$REPORT/events.txt"
echo
cat "$REPORT/attempts.txt"
echo
echo "-- verl training steps (driver log)"
cat "$REPORT/steps.txt"
echo
cat "$REPORT/timings.txt"
echo "report: $REPORT"
if [ "$status" -ne 0 ] || [ "$steps" -eq 0 ]; then
    # The training workers' own errors are in Ray's session logs, gone with the cluster.
    ray_root=$("$VPY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["ray_temp_root"])' \
        "$STATE/local.json" 2>/dev/null) || ray_root=
    if [ -n "$ray_root" ] && [ -d "$ray_root/session_latest/logs" ]; then
        tar -czf "$REPORT/ray-logs.tar.gz" -C "$ray_root/session_latest" logs 2>/dev/null || true
    fi
fi
if [ "$status" -ne 0 ]; then
    echo "-- driver log (tail)"
    tail -n 60 "$REPORT/driver.log"
    echo "gpu_smoke: the task did not succeed (see above)" >&2
    exit 1
fi
if [ "$steps" -eq 0 ]; then
    echo "gpu_smoke: the task succeeded but logged no training step" >&2
    exit 1
fi
echo "gpu_smoke: OK"
