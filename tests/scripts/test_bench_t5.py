"""scripts/bench_pretrain.py --model t5 trains both T5s on the same span-corrupted batches, with equal parameter
counts (the same architecture)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_pretrain.py"


def test_t5_benchmark_prints_both_models():
    args = ["--model", "t5", "--config", "tiny", "--vocab-size", "32100", "--batch-size", "2", "--seq-len", "16"]
    args += ["--steps", "1", "--warmup", "1", "--precision", "fp32", "--no-memory"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["model"] == "t5" and result["ours"]["parameters"] == result["transformers"]["parameters"]
    assert result["ours"]["tokens_per_s"] > 0 and result["transformers"]["tokens_per_s"] > 0


def test_gemm_share_profiles_both_models_and_bounds_the_speedup():
    script = SCRIPT.parent / "gemm_share.py"
    args = ["--model", "t5", "--config", "tiny", "--batch-size", "2", "--seq-len", "16", "--warmup", "1"]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    for name in ("ours", "transformers"):
        entry = result[name]
        assert 0 < entry["gemm_s"] < entry["profiled_s"] and 0 < entry["gemm_share"] < 1
    assert result["bound"] == round(result["transformers"]["profiled_s"] / result["ours"]["gemm_s"], 2)


def test_gemm_share_of_our_bert_variant_against_bert_for_masked_lm():
    script = SCRIPT.parent / "gemm_share.py"
    args = ["--model", "bert", "--config", "tiny", "--batch-size", "2", "--seq-len", "16", "--warmup", "1"]
    args += ["--variant", "fused+unpad"]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["variant"] == "fused+unpad"
    for name in ("ours", "transformers"):
        entry = result[name]
        assert abs(sum(entry["categories_s"].values()) - entry["profiled_s"]) < 1e-3
        assert "aten::mm" in entry["top_ms"] and entry["categories_s"]["optimizer"] > 0


def test_kernel_names_fall_into_their_categories():
    sys.path.insert(0, str(SCRIPT.parent))
    from gemm_share import category

    cuda = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "gemm",
        "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNN": "gemm",
        "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>": "attention",
        "fmha_cutlassB_bf16_aligned_64x64_k64_sm80": "attention",
        "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
        "triton_per_fused_native_layer_norm_0": "compiled",
        "Memcpy HtoD (Pageable -> Device)": "copy",
        "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>": "other",
    }
    assert {name: category(name, "cuda") for name in cuda} == cuda
    cpu = {"aten::addmm": "gemm", "aten::_fused_adamw_": "optimizer", "aten::matmul": "other", "aten::gelu": "other"}
    assert {name: category(name, "cpu") for name in cpu} == cpu
