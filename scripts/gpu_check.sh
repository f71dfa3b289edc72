#!/usr/bin/env bash
# Every check that needs a GPU, in one go, on a machine with CUDA and torch (>= 2.6) already installed:
#   bash scripts/gpu_check.sh OUT_DIR [all|tests|command|signal|learning|fsdp|bench|bench_graphs|bench_tiny|profile|sweep|suite1|suite2]
# "all" (the default) is, in this order: signal (SIGTERM sent to plm-train while it compiles bert_base; how many
# seconds it took to stop, its exit status and log), command (scripts/bench_command.py --suite gpu: plm-train itself
# on bert_base at 128 and 512 tokens, gpt2_small at 1,024 and t5_v1_1_base at 512/114, each speed variant's tokens/s
# and MFU from its metrics.jsonl after warm-up, compile seconds and graphs, beside the transformers model on batches
# of the same shape; command.json is rewritten after each variant, each variant's console is in command_logs.tar.gz)
# and tests (pytest -m gpu): up to 10 minutes on an H200, where each compiled variant spends 30-40 s compiling
# (run `all` alone in a call, or `signal` and `command` in one and `tests` in another). The other parts, one by one: learning (the compiled step's
# gradients against eager's on this GPU, then 40 steps of plm-train with tiny bert, gpt2 and t5: compiled, aot_eager
# and eager, the loss and gradient norm of steps 1, 2, 20 and 40).
# Writes under OUT_DIR: env.json, gpu_tests.log (pytest -m gpu), fsdp/ (a 1-process torchrun FSDP run on NCCL
# with bf16, compiled blocks and a resume; metrics.jsonl, logs), bench_base.json (bert_base, sequence 128, bf16:
# each speed switch and transformers' BertForMaskedLM, with MFU), bench_graphs.json (CUDA graphs on top of
# compilation at batch 32), bench_tiny_cuda.json, profile_b{32,256}.json (where a bert_base step's kernel time
# goes: GEMMs, attention, optimizer, compiled kernels, the slowest kernels; ours and transformers'),
# sweep_b*.json (the compiled unpadded variant and transformers at batch 64..512), suite{1,2}.xml/.log (the whole
# test suite in two halves, JUnit XML so that every failure keeps its name); bench_*.json are the synthetic-batch
# harness's figures (the training step alone, labelled so), not the command's. Each part stops itself before ten
# minutes; COMMAND_SECONDS (440), VARIANT_SECONDS (150) and TESTS_SECONDS (110) bound the command part, each
# plm-train in it and the tests.
set -uo pipefail
out=${1:?usage: gpu_check.sh OUT_DIR [all|tests|command|signal|learning|fsdp|bench|bench_graphs|bench_tiny|profile|sweep|suite1|suite2]}
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

if [[ $part == all || $part == signal ]]; then
  echo "== SIGTERM to plm-train while it compiles bert_base (compiled, unpadded); it must stop within 30 s"
  log="$out/signal.log"
  "$py" -m plm_toolkit.commands.train model=bert_base objective=mlm trainer.batch_size=128 hardware=cuda_bf16 \
    hardware.compile=true hardware.unpad=true trainer.max_steps=50 trainer.progress_bar=false \
    hydra.run.dir="$(mktemp -d)/run" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 480); do grep -q "training for" "$log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.25; done
  sleep 4
  grep -q "torch.compile: step" "$log" && echo "(the first step had already compiled: not a test of compilation)"
  sent=$(date +%s.%N); kill -TERM $pid
  ( sleep 60; kill -KILL $pid 2>/dev/null ) & watchdog=$!
  wait $pid; status=$?
  kill $watchdog 2>/dev/null
  echo "stopped $("$py" -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$sent") s after \
SIGTERM, exit status $status (75: requeue, checkpoint kept or nothing to save)"
  tail -4 "$log"
fi

if [[ $part == all || $part == command ]]; then
  echo "== plm-train itself: bert_base 128, gpt2_small 1024, t5_v1_1_base 512/114, bert_base 512 beside transformers"
  command_s=${COMMAND_SECONDS:-440} variant_s=${VARIANT_SECONDS:-150}
  timeout "$command_s" "$py" scripts/bench_command.py --suite gpu --steps 30 --warmup-steps 10 \
    --timeout "$variant_s" --out "$out/command.json" --logs "$out/command_logs" > /dev/null 2> "$out/command.log"
  echo "exit $?"
  tar -czf "$out/command_logs.tar.gz" -C "$out" command_logs && rm -rf "$out/command_logs"
  "$py" -c "import json,sys; r=json.load(open(sys.argv[1]))
for c, x in r['cases'].items():
    variants = x.get('variants') or {v: e[-1] for v, e in x['runs'].items() if e}
    print(c, {v: (e.get('tokens_per_s'), e.get('mfu'), e.get('compile_s'), e.get('compiled_graphs'), e.get('error'))
              for v, e in variants.items()}, x.get('reference', {}).get('tokens_per_s'), x.get('speedup_vs_reference'))
" "$out/command.json"
fi

if [[ $part == all || $part == tests ]]; then
  echo "== gpu tests"
  tests_s=${TESTS_SECONDS:-110}
  timeout "$tests_s" "$py" -m pytest -q -ra -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/gpu_tests.log" | tail -15
fi

if [[ $part == learning ]]; then
  echo "== does a compiled step learn? bert/mlm, gpt2/clm, t5 spans, electra/rtd, xlnet/plm, transformer_xl/clm: each gradient against eager's, and 6 steps"
  timeout 150 "$py" -m pytest -q -ra -p no:cacheprovider tests/training/test_compiled_gradients.py 2>&1 \
    | tee "$out/compiled_gradients.log" | tail -8
  echo "== plm-train, tiny models, 40 steps: loss at steps 1/20/40 and grad norms (eager, compiled, aot_eager)"
  for run in "bert_tiny objective=mlm hardware.compile=true" "gpt2_tiny hardware.compile=true" \
             "bert_tiny objective=mlm hardware.compile=true hardware.compile_backend=aot_eager" \
             "t5_tiny objective=span_corruption hardware.compile=true" "bert_tiny objective=mlm hardware.compile=false"; do
    dir=$(mktemp -d)
    # shellcheck disable=SC2086
    timeout 60 "$py" -m plm_toolkit.commands.train model=$run hardware=cuda_bf16 trainer.max_steps=40 \
      trainer.log_every=1 trainer.eval_every=0 trainer.eval_at_end=false trainer.save_every=0 \
      trainer.progress_bar=false hydra.run.dir="$dir/run" > "$dir/log" 2>&1
    echo "$run: exit $? $("$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if 'lr' in l]
print([(x['step'], round(x['loss'], 3), round(x.get('grad_norm', -1), 3)) for x in r if x['step'] in (1, 2, 20, 40)])" \
      "$dir/run/metrics.jsonl" 2>&1 | tail -1)"
  done
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
