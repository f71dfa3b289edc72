#!/usr/bin/env bash
# Every check that needs a GPU, in one go, on a machine with CUDA and torch (>= 2.6) already installed:
#   bash scripts/gpu_check.sh OUT_DIR [all|tests|command|fsdp|bench|bench_graphs|bench_tiny|profile|sweep|suite1|suite2]
# "all" (the default) is pytest -m gpu and the command-level benchmark: command.json (scripts/bench_command.py --suite
# gpu: plm-train itself on bert_base at 128 and 512 tokens, gpt2_small at 1,024 and t5_v1_1_base at 512/114, each
# speed variant's tokens/s and MFU from its metrics.jsonl after warm-up, compile seconds and graphs, beside the
# transformers model on batches of the same shape; about 8 minutes on an H100). The other parts, one by one:
# Writes under OUT_DIR: env.json, gpu_tests.log (pytest -m gpu), fsdp/ (a 1-process torchrun FSDP run on NCCL
# with bf16, compiled blocks and a resume; metrics.jsonl, logs), bench_base.json (bert_base, sequence 128, bf16:
# each speed switch and transformers' BertForMaskedLM, with MFU), bench_graphs.json (CUDA graphs on top of
# compilation at batch 32), bench_tiny_cuda.json, profile_b{32,256}.json (where a bert_base step's kernel time
# goes: GEMMs, attention, optimizer, compiled kernels, the slowest kernels; ours and transformers'),
# sweep_b*.json (the compiled unpadded variant and transformers at batch 64..512), suite{1,2}.xml/.log (the whole
# test suite in two halves, JUnit XML so that every failure keeps its name); bench_*.json are the synthetic-batch
# harness's figures (the training step alone, labelled so), not the command's. Each part stops itself before ten
# minutes.
set -uo pipefail
out=${1:?usage: gpu_check.sh OUT_DIR [all|tests|command|fsdp|bench|bench_graphs|bench_tiny|profile|sweep|suite1|suite2]}
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
  timeout 240 "$py" -m pytest -q -ra -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/gpu_tests.log" | tail -15
fi

if [[ $part == all || $part == command ]]; then
  echo "== plm-train itself: bert_base 128 and 512, gpt2_small 1024, t5_v1_1_base 512/114 beside transformers"
  timeout 540 "$py" scripts/bench_command.py --suite gpu --steps 30 --warmup-steps 10 --out "$out/command.json" \
    > /dev/null 2> "$out/command.log"
  echo "exit $?"
  "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); [print(c, {v: (e.get('tokens_per_s'), e.get('mfu'),
    e.get('compile_s'), e.get('error')) for v, e in x['variants'].items()}, x.get('reference', {}).get('tokens_per_s'),
    x.get('speedup_vs_reference')) for c, x in r['cases'].items()]" "$out/command.json"
fi

if [[ $part == fsdp ]]; then
  echo "== FSDP on NCCL, 1 process, bf16, compiled blocks, then a resume"
  run="$out/fsdp/run"; mkdir -p "$out/fsdp"
  common=(hardware=fsdp hardware.device=cuda hardware.precision=bf16 hardware.compile=true
          trainer.save_every=10 trainer.log_every=5 trainer.progress_bar=false "hydra.run.dir=$run")
  timeout 300 "$py" -m torch.distributed.run --standalone --nproc_per_node 1 -m plm_toolkit.commands.train \
    "${common[@]}" trainer.max_steps=20 optimizer.total_steps=30 > "$out/fsdp/first.log" 2>&1
  echo "first leg exit $?"
  timeout 240 "$py" -m torch.distributed.run --standalone --nproc_per_node 1 -m plm_toolkit.commands.train \
    "${common[@]}" trainer.max_steps=30 optimizer.total_steps=30 > "$out/fsdp/resume.log" 2>&1
  echo "resumed leg exit $?"
  cp "$run/metrics.jsonl" "$out/fsdp/metrics.jsonl" 2>/dev/null && tail -3 "$out/fsdp/metrics.jsonl"
  ls "$run/checkpoints/last/" "$run/checkpoints/last/sharded" 2>&1 | tee "$out/fsdp/last_checkpoint.txt"
fi

if [[ $part == bench ]]; then
  echo "== bench: bert_base, sequence 128, bf16"
  timeout 570 "$py" scripts/bench_pretrain.py --config base --seq-len 128 --precision bf16 --device cuda \
    --warmup 5 --steps 10 --repeats 3 > "$out/bench_base.json" 2> "$out/bench_base.log"
  echo "exit $?"
  "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: (v['tokens_per_s'], v.get('mfu'))
    for k, v in r['runs'].items()}, indent=1)); print('speedups', r['speedups'])" "$out/bench_base.json"
fi

if [[ $part == bench_graphs ]]; then
  echo "== bench: bert_base, batch 32, compiled with and without CUDA graphs (hardware.compile_mode=reduce-overhead)"
  timeout 500 "$py" scripts/bench_pretrain.py --config base --seq-len 128 --precision bf16 --device cuda \
    --variants fused+compile fused+compile+cudagraphs --large-batch 0 --warmup 5 --steps 20 --repeats 3 --reference-compile \
    > "$out/bench_graphs.json" 2> "$out/bench_graphs.log"
  echo "exit $?"
fi

if [[ $part == bench_tiny ]]; then
  echo "== bench: BERT-Tiny, fp32 on CUDA"
  timeout 400 "$py" scripts/bench_pretrain.py --config tiny --precision fp32 --device cuda --large-batch 0 \
    --warmup 5 --steps 20 --repeats 3 > "$out/bench_tiny_cuda.json" 2> "$out/bench_tiny_cuda.log"
  echo "exit $?"
fi

if [[ $part == profile ]]; then
  echo "== profile: one bert_base step (sequence 128, bf16), ours compiled and unpadded against BertForMaskedLM"
  for batch in 32 256; do
    timeout 280 "$py" scripts/gemm_share.py --model bert --config base --device cuda --precision bf16 --threads 4 \
      --variant fused+compile+unpad --batch-size $batch --warmup 4 --profiled-steps 3 --top 20 \
      > "$out/profile_b$batch.json" 2> "$out/profile_b$batch.log"
    echo "batch $batch exit $?"
    "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: (r[k]['step_s'], r[k]['categories_s']) for k in ('ours', 'transformers')})" "$out/profile_b$batch.json"
  done
fi

if [[ $part == sweep ]]; then
  echo "== sweep: bert_base, sequence 128, bf16, compiled + unpadded against BertForMaskedLM by batch size"
  for batch in 64 128 512; do
    timeout 180 "$py" scripts/bench_pretrain.py --config base --seq-len 128 --precision bf16 --device cuda \
      --variants fused+compile+unpad --batch-size $batch --large-batch 0 --warmup 4 --steps 8 --repeats 2 \
      > "$out/sweep_b$batch.json" 2> "$out/sweep_b$batch.log"
    echo "batch $batch exit $?"
    "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: (v['tokens_per_s'], v.get('mfu'), v.get('peak_memory_mb')) for k, v in r['runs'].items()})" "$out/sweep_b$batch.json"
  done
fi

if [[ $part == suite1 || $part == suite2 ]]; then
  # Test files in a fixed order, split in two halves of roughly equal count; each half under the call limit.
  mapfile -t files < <(cd "$repo" && find tests -name 'test_*.py' | sort)
  half=$(( (${#files[@]} + 1) / 2 ))
  if [[ $part == suite1 ]]; then chosen=("${files[@]:0:$half}"); else chosen=("${files[@]:$half}"); fi
  echo "== $part: ${#chosen[@]} test files"
  timeout 560 "$py" -m pytest -q -ra -p no:cacheprovider --junitxml="$out/$part.xml" "${chosen[@]}" \
    > "$out/$part.log" 2>&1
  echo "exit $?"
  grep -E "^(FAILED|ERROR)|passed|failed" "$out/$part.log" | tail -20
fi
