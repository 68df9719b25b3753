#!/usr/bin/env bash
# Issue 49 item 4: can NDIF's own server (PyPI `ndif` 0.1.2) serve an nnsight remote request on this CPU-only
# machine? Reproduces what results/models/ndif_local.md reports. Everything lives outside the repo (/tmp);
# the workbench's dependencies are not touched. Usage: scripts/ndif_local.sh [install|stock|cpu|request|stop]
#   install  venv /tmp/ndif312 (python 3.12) with ndif[api,ray]==0.1.2 (pins nnsight 0.8.1, as the workbench)
#   stock    ndif's own `ndif start` + `ndif deploy`: the controller sees no GPU node, nothing is placed
#   cpu      Ray head advertising one logical GPU, the model actor swapped through ndif's actor-class
#            setting for a CPU one (scripts/ndif_cpu_actor.py), then one remote request from the workbench
#   request  only the requests of `cpu`, against a server already started (NO_REQUEST=1 scripts/ndif_local.sh cpu)
#   stop     stop everything this script started (ndif stop + ray stop for /tmp/ndif_ray)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python}
VENV=/tmp/ndif312
MODEL=${MODEL:-/root/.cache/workbench/smollm2-135m}   # core.models.llm.prepare_smollm2() writes it
export NDIF_HOME=/tmp/ndif_home NDIF_RAY_TEMP_DIR=/tmp/ndif_ray RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
export HF_HUB_OFFLINE=1 PATH=$VENV/bin:$PATH
KEY="nnsight.modeling.transformers.TransformersModel:{\"repo_id\": \"$MODEL\", \"revision\": null, \"task\": \"text-generation\"}"

deploy() {  # $1: actor class or "" for the controller's default
  cat > /tmp/ndif_deploy.yaml <<YAML
models:
  - checkpoint: $MODEL
    model_key: '$KEY'
    dtype: float32
    size_bytes: 540000000
    gpus: 1
${1:+    actor_class: $1}
YAML
  timeout 300 ndif deploy -f /tmp/ndif_deploy.yaml
}

case "${1:-}" in
install)
  $PY312 -m venv $VENV
  # torch: PyPI's 2.13.0 wheel for cp312 (this machine's CPU wheel is cp311 only); it runs on CPU.
  $VENV/bin/pip install -q torch==2.13.0 'ndif[api,ray]==0.1.2'
  # the workbench's traces import jaxtyping on the server (ModuleNotFoundError without it)
  $VENV/bin/pip install -q jaxtyping
  command -v redis-server >/dev/null || apt-get install -y -q redis-server
  $VENV/bin/python -c "import ndif,nnsight,torch,ray,transformers as t;print('nnsight',nnsight.__version__,'torch',torch.__version__,'ray',ray.__version__,'transformers',t.__version__)"
  ;;
stock)
  mkdir -p $NDIF_HOME
  ndif start redis ray api
  sleep 40
  curl -s -m 10 http://127.0.0.1:8001/status; echo
  deploy "" || true
  sleep 30
  curl -s -m 10 http://127.0.0.1:8001/status; echo
  ;;
cpu)
  mkdir -p $NDIF_HOME $NDIF_RAY_TEMP_DIR
  (cd $NDIF_HOME && ndif start redis api)   # from there: redis writes its dump.rdb into its working directory
  # results larger than Redis' pubsub cap go to an object store (MinIO/rustfs at localhost:9000, not run here);
  # ndif derives the cap from Redis' own limits (min(soft, hard / 2)): raised to 1 GiB, so the weights the
  # workbench reads in one trace (540 MB for smollm2-135m) come back on the websocket
  sleep 2; redis-cli -p 6379 config set client-output-buffer-limit "pubsub 2gb 1gb 60"
  # ndif's start.sh computes cuda_memory_bytes=0 and Ray sees no GPU: declare one logical GPU with 8 GB,
  # and put the CPU actor module on the workers' path.
  # GRPC_ENABLE_FORK_SUPPORT=0 as ndif's start.sh sets it: without it a second ray:// client (a second
  # `ndif deploy`) got "Starting Ray client server failed" here once
  GRPC_ENABLE_FORK_SUPPORT=0 PYTHONPATH=$HERE/scripts ray start --head --num-gpus=1 --port=6385 --ray-client-server-port=10001 \
    --resources='{"head": 10, "cuda_memory_bytes": 8000000000, "cpu_memory_bytes": 20000000000}' \
    --include-dashboard=true --dashboard-port=8265 --temp-dir=$NDIF_RAY_TEMP_DIR
  (PYTHONPATH=$HERE/scripts RAY_ADDRESS=127.0.0.1:6385 NDIF_MODEL_IMPORT_PATH=${ACTOR:-ndif_cpu_actor.CPUModelActor} \
     nohup python -m ndif.services.ray.deployments.controller.controller > $NDIF_HOME/logs/controller.log 2>&1 &)
  sleep 30
  deploy "${ACTOR:-ndif_cpu_actor.CPUModelActor}"
  for _ in $(seq 30); do curl -s -m 10 http://127.0.0.1:8001/status | grep -q '"RUNNING"\|"running"' && break; sleep 10; done
  curl -s -m 10 http://127.0.0.1:8001/status; echo
  [ -n "${NO_REQUEST:-}" ] && exit 0   # serve only; `request` runs the workbench's requests later
  "$0" request
  ;;
request)
  cd "$HERE" && NDIF_HOST=http://127.0.0.1:8001 nice -n 10 .venv/bin/python scripts/ndif_local_request.py "$MODEL"
  ;;
stop)
  ndif stop || true
  ray stop --force || true   # note: stops every Ray process of this user on the machine
  ;;
*) echo "usage: $0 install|stock|cpu|request|stop" >&2; exit 2 ;;
esac
