"""The throughput bench's kernel classes (bench/train_throughput.py --profile): real kernel names
from cuDNN, CUTLASS, ATen and Triton land in the class a reader expects."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from train_throughput import classify_kernel  # noqa: E402

MATRIX = "matrix (conv, linear)"
BN = "batch norm"
ELEMENTWISE = "elementwise (relu, add, ...)"


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        (
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
            MATRIX,
        ),
        ("sm90_xmma_wgrad_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", MATRIX),
        (
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn>",
            MATRIX,
        ),
        ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>(...)", "copy, layout"),
        ("void cudnn::bn_fw_tr_1C11_singleread_spec_kernel<__nv_bfloat16, float>(...)", BN),
        ("void at::native::batch_norm_collect_statistics_channels_last_kernel<...>(...)", BN),
        ("triton_red_fused__native_batch_norm_legit_functional_relu_7", BN),
        ("triton_poi_fused_add_relu_threshold_backward_12", ELEMENTWISE),
        (
            "void at::native::vectorized_elementwise_kernel<4, launch_clamp_scalar>(...)",
            ELEMENTWISE,
        ),
        (
            "void at::native::multi_tensor_apply_kernel<...L2NormFunctor...>(...)",
            "optimizer",
        ),
        ("void at::native::(anonymous namespace)::fused_sgd_kernel<float, 3>(...)", "optimizer"),
        ("Memcpy HtoD (Pageable -> Device)", "copy, layout"),
        (
            "void at::native::(anonymous namespace)::max_pool_forward_nhwc<...>(...)",
            "pooling, loss, reduce",
        ),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, ...>>(...)",
            "pooling, loss, reduce",
        ),
        ("some_kernel_nobody_named", "other"),
    ],
)
def test_a_kernel_lands_in_its_class(name: str, cls: str) -> None:
    assert classify_kernel(name) == cls
