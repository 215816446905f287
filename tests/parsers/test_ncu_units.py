"""Tiny unit tests: ncu unit strings → base units, and kernel base names (hand-written inputs)."""

from __future__ import annotations

import pytest

from parsers.ncu_kernels import short_name
from parsers.ncu_units import column_name, to_base


@pytest.mark.parametrize(
    "unit, scale, base",
    [
        ("", 1.0, ""),
        ("%", 1.0, "%"),
        ("byte", 1.0, "byte"),
        ("Kbyte", 1e3, "byte"),
        ("Mbyte", 1e6, "byte"),
        ("Gbyte", 1e9, "byte"),
        ("KiB", 1024.0, "byte"),
        ("ns", 1.0, "ns"),
        ("nsecond", 1.0, "ns"),
        ("us", 1e3, "ns"),
        ("usecond", 1e3, "ns"),
        ("msecond", 1e6, "ns"),
        ("ms", 1e6, "ns"),
        ("second", 1e9, "ns"),
        ("byte/s", 1.0, "byte/s"),
        ("Gbyte/s", 1e9, "byte/s"),
        ("Gbyte/second", 1e9, "byte/s"),
        ("Tbyte/s", 1e12, "byte/s"),
        ("Mbyte/second", 1e6, "byte/s"),
        ("hz", 1.0, "Hz"),
        ("Mhz", 1e6, "Hz"),
        ("Ghz", 1e9, "Hz"),
        ("GHz", 1e9, "Hz"),
        ("cycle/nsecond", 1e9, "Hz"),
        ("cycle/usecond", 1e6, "Hz"),
        ("cycle", 1.0, "cycle"),
        ("inst/cycle", 1.0, "inst/cycle"),
        ("warp", 1.0, "warp"),
        ("Kbyte/block", 1e3, "byte/block"),
        ("register/thread", 1.0, "register/thread"),
        ("%/Kbyte", 1e3, "%/byte"),  # ncu's convention: 0.752 %/Kbyte (human) is 752 %/byte (base)
    ],
)
def test_to_base(unit, scale, base):
    got_scale, got_base = to_base(unit)
    assert got_base == base
    assert got_scale == pytest.approx(scale, rel=1e-12)


def test_unknown_units_pass_through_unscaled():
    assert to_base("request/sector") == (1.0, "request/sector")
    assert to_base("SM") == (1.0, "SM")


def test_column_names_carry_the_unit():
    assert column_name("dram__bytes_read.sum", "byte") == "dram__bytes_read.sum [byte]"
    assert column_name("launch__grid_size", "") == "launch__grid_size"


@pytest.mark.parametrize(
    "name, short",
    [
        (
            "void at::<unnamed>::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(T1 *, T1 *, long)",
            "nll_loss_forward_reduce_cuda_kernel_2d",
        ),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(T1::Params)", "Kernel2"),
        (
            "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_execute_kernel__5x_cudnn",
            "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_execute_kernel__5x_cudnn",
        ),
        (
            "void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)",
            "vectorized_elementwise_kernel",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, 4>(float *, const float *, int)",
            "softmax_warp_forward",
        ),
        ("void unnamed>::cunn_SoftMaxForward<4, float>(T4 *, const T2 *, int)", "cunn_SoftMaxForward"),
        (
            "void scal_kernel<float, float, 1, 1, 6, 5, 5, 3>(cublasTransposeParams<T2>, const T1 *, T1 *, const T2 *)",
            "scal_kernel",
        ),
    ],
)
def test_short_name(name, short):
    assert short_name(name) == short


def test_short_name_of_nothing():
    assert short_name(None) is None
    assert short_name(float("nan")) is None
