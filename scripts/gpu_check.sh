#!/usr/bin/env bash
# Every check that needs a GPU, in one go, on a machine with CUDA and torch (>= 2.6) already installed:
#   bash scripts/gpu_check.sh OUT_DIR [all|tests|fsdp|bench|bench_graphs|bench_tiny]
# Writes under OUT_DIR: env.json, gpu_tests.log (pytest -m gpu), fsdp/ (a 1-process torchrun FSDP run on NCCL
# with bf16, compiled blocks and a resume; metrics.jsonl, logs), bench_base.json (bert_base, sequence 128, bf16:
# each speed switch and transformers' BertForMaskedLM, with MFU), bench_graphs.json (CUDA graphs on top of
# compilation at batch 32), bench_tiny_cuda.json. Each part stops itself
# before ten minutes; run the parts one by one where a call has a time limit.
set -uo pipefail
out=${1:?usage: gpu_check.sh OUT_DIR [all|tests|fsdp|bench|bench_graphs|bench_tiny]}
part=${2:-all}
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python}
mkdir -p "$out"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$repo"

"$py" - > "$out/env.json" <<'PY'
import json, torch
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)
                  if torch.cuda.is_available() else None, "bf16": torch.cuda.is_available() and torch.cuda.is_bf16_supported()}))
PY
cat "$out/env.json"

if [[ $part == all || $part == tests ]]; then
  echo "== gpu tests"
  timeout 540 "$py" -m pytest -q -ra -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/gpu_tests.log" | tail -15
fi

if [[ $part == all || $part == fsdp ]]; then
  echo "== FSDP on NCCL, 1 process, bf16, compiled blocks, then a resume"
  run="$out/fsdp/run"
  common=(hardware=fsdp hardware.device=cuda hardware.precision=bf16 hardware.compile=true
          trainer.save_every=10 trainer.log_every=5 trainer.progress_bar=false "hydra.run.dir=$run")
  timeout 300 "$py" -m torch.distributed.run --standalone --nproc_per_node 1 -m plm_toolkit.train \
    "${common[@]}" trainer.max_steps=20 optimizer.total_steps=30 > "$out/fsdp/first.log" 2>&1
  echo "first leg exit $?"
  timeout 240 "$py" -m torch.distributed.run --standalone --nproc_per_node 1 -m plm_toolkit.train \
    "${common[@]}" trainer.max_steps=30 optimizer.total_steps=30 > "$out/fsdp/resume.log" 2>&1
  echo "resumed leg exit $?"
  cp "$run/metrics.jsonl" "$out/fsdp/metrics.jsonl" 2>/dev/null && tail -3 "$out/fsdp/metrics.jsonl"
  ls "$run/checkpoints/last/" "$run/checkpoints/last/sharded" 2>&1 | tee "$out/fsdp/last_checkpoint.txt"
fi

if [[ $part == all || $part == bench ]]; then
  echo "== bench: bert_base, sequence 128, bf16"
  timeout 570 "$py" scripts/bench_pretrain.py --config base --seq-len 128 --precision bf16 --device cuda \
    --warmup 5 --steps 10 --repeats 3 > "$out/bench_base.json" 2> "$out/bench_base.log"
  echo "exit $?"
  "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: (v['tokens_per_s'], v.get('mfu'))
    for k, v in r['runs'].items()}, indent=1)); print('speedups', r['speedups'])" "$out/bench_base.json"
fi

if [[ $part == all || $part == bench_graphs ]]; then
  echo "== bench: bert_base, batch 32, compiled with and without CUDA graphs (hardware.compile_mode=reduce-overhead)"
  timeout 500 "$py" scripts/bench_pretrain.py --config base --seq-len 128 --precision bf16 --device cuda \
    --variants fused+compile fused+compile+cudagraphs --large-batch 0 --warmup 5 --steps 20 --repeats 3 \
    > "$out/bench_graphs.json" 2> "$out/bench_graphs.log"
  echo "exit $?"
fi

if [[ $part == all || $part == bench_tiny ]]; then
  echo "== bench: BERT-Tiny, fp32 on CUDA"
  timeout 400 "$py" scripts/bench_pretrain.py --config tiny --precision fp32 --device cuda --large-batch 0 \
    --warmup 5 --steps 20 --repeats 3 > "$out/bench_tiny_cuda.json" 2> "$out/bench_tiny_cuda.log"
  echo "exit $?"
fi
