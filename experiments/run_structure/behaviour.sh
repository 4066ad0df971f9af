#!/usr/bin/env bash
# Runs the behaviour figures of the run structure study from a checkout into OUT:
#   1. the quickstart cut to 2 batches (16 held-out problems at batches 0 and 2),
#   2. the DB-bench supervised run cut to 24 oracle chats, 1 epoch (3 steps),
#   3. the offline groups of run 1 (1 RCE and 1 GRPO epoch, 8 held-out),
#   4. every shipped config's --dry_run output.
# Usage: bash experiments/run_structure/behaviour.sh CHECKOUT OUT
# then:  python3 -m experiments.run_structure.compare OUT_BEFORE OUT_AFTER
set -euo pipefail
checkout=$(realpath "$1"); out=$(realpath -m "$2")
mkdir -p "$out/configs" "$out/dry_run"
cd "$checkout"
cat > "$out/configs/quickstart.yaml" <<YAML
import: $checkout/configs/assignments/math_grpo_quickstart.yaml
assignment_config:
  output_dir: $out/quickstart
  rollout: {max_batches: 2}
  evaluation: {every_n_batches: 10, max_samples: 16}
YAML
cat > "$out/configs/sft.yaml" <<YAML
import: $checkout/configs/assignments/db_bench_sft.yaml
supervised_training_config:
  output_dir: $out/sft
  task: {parameters: {num_train: 40, num_validation: 16, num_selection: 8}}
  demonstrations: {oracle: {num_samples: 24}}
  training: {epochs: 1}
YAML
cat > "$out/configs/offline.yaml" <<YAML
import: $checkout/configs/assignments/offline_grpo.yaml
offline_training_config:
  output_dir: $out/offline
  groups: {runs_jsonl: {path: $out/quickstart/runs.jsonl}}
  grpo: {epochs: 1}
  evaluation: {max_samples: 8}
YAML
for name in quickstart sft offline; do
  python3 src/run_experiment.py --config_path "$out/configs/$name.yaml" --no_progress \
    > "$out/$name.log" 2>&1 || { echo "$name failed: $out/$name.log"; exit 1; }
done
for config in configs/assignments/*.yaml; do
  python3 src/run_experiment.py --config_path "$config" --dry_run \
    > "$out/dry_run/$(basename "$config" .yaml).txt" 2>&1 || true
done
echo "done: $out"
