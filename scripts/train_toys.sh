#!/usr/bin/env bash
# Rebuild every shipped toy checkpoint in data/models/ (circuits/). Each model trains on one CPU
# thread in a few minutes; JOBS=N runs N trainings at once. Pass model names to rebuild only those.
#   scripts/train_toys.sh                 # all, one after another
#   JOBS=3 scripts/train_toys.sh          # three at a time
#   scripts/train_toys.sh ioi-attn-1l2h   # one
set -euo pipefail
cd "$(dirname "$0")/.."
WB=${WB:-.venv/bin/workbench}
OUT=${OUT:-data/models}
JOBS=${JOBS:-1}

declare -A CMD=(
  [ioi-attn-1l2h]="ioi --ffn none --layers 1 --heads 2 --seed 0"
  [ioi-attn-2l1h]="ioi --ffn none --layers 2 --heads 1 --seed 0"
  [modadd-dense]="modadd --ffn dense --seed 0"
  [modadd-glu]="modadd --ffn glu --seed 0"
  [carry-dense]="carry --ffn dense --seed 0"
  [carry-moe-learned]="carry --ffn moe --experts 4 --top-k 1 --router learned --seed 0"
  [carry-moe-frozen]="carry --ffn moe --experts 4 --top-k 1 --router frozen --seed 0"
  [histogram-dense]="histogram --ffn dense --seed 0"
  [markov-3h]="markov --ffn none --heads 3 --seed 0"
  [icl-regression]="icl-regression --ffn dense --layers 4 --seed 0"
)
ORDER=(ioi-attn-1l2h ioi-attn-2l1h modadd-dense modadd-glu carry-dense carry-moe-learned carry-moe-frozen
       histogram-dense markov-3h icl-regression)
names=("$@")
[ ${#names[@]} -eq 0 ] && names=("${ORDER[@]}")

for name in "${names[@]}"; do
  [ -n "${CMD[$name]:-}" ] || { echo "unknown model $name" >&2; exit 2; }
  # shellcheck disable=SC2086
  "$WB" train ${CMD[$name]} --name "$name" --out "$OUT/$name" --force --json > "/tmp/train-$name.json" &
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
done
wait
for name in "${names[@]}"; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['name'], r['seconds'], 's', r['test'])" \
    "/tmp/train-$name.json"
done
