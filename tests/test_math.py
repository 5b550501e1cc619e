"""Accuracy of the core's portable float32 math (firmware/core/mct_math.h) against float64 NumPy.

The header documents: exp, log, tanh, sin and cos within 1.5 ulp; log1p and sin/cos of large arguments
within 2.5 ulp (sin/cos: absolute error near their zeros; accurate for |x| <= 8192); sqrt correctly
rounded (on this host mct_sqrtf is the FPU's square root instruction, correctly rounded by IEEE 754, so
only the integer-only mct_sqrtf_soft of FPU-less targets is checked bit for bit against IEEE sqrt). exp is
0 below -86 and +inf above 88.5. The functions are reached through mcutrain._core.math_eval(name, float32
array), which runs the same C inline functions as the core.

The error of a result y at an input x is |y - f(x)| measured in units of the float32 spacing at the exact
value f(x) (computed in float64): 2^(floor(log2 |f(x)|) - 23), and 2^-149 in the subnormal range. That
is "the ulp of the true result", not of y, so a result that rounds across a power of two is not flattered.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from mcutrain import _core

Ref = Callable[[np.ndarray], np.ndarray]

FLT_TRUE_MIN = 2.0**-149
SMALL_TRIG = np.pi  # "small" sin/cos arguments: one period around 0 (1.5 ulp)
TRIG_LIMIT = 8192.0  # the header's range of accurate sin/cos (2.5 ulp)


def ulp32(ref: np.ndarray) -> np.ndarray:
    """Spacing of float32 numbers at each exact value in ref (float64): 2^(floor(log2|r|) - 23),
    never below the subnormal spacing 2^-149."""
    r = np.abs(np.asarray(ref, dtype=np.float64))
    _, e = np.frexp(r)  # r = m * 2^e with m in [0.5, 1)
    u = np.ldexp(1.0, e - 24)
    return np.where(r >= 2.0**-126, u, FLT_TRUE_MIN)


def ulp_errors(name: str, x: np.ndarray, ref: Ref) -> np.ndarray:
    """Error of the core's `name` at each float32 x, in float32 ulps of the float64 reference."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = _core.math_eval(name, x).astype(np.float64)
    r = ref(x.astype(np.float64))
    assert np.isfinite(r).all(), "the reference must be finite on an accuracy grid"
    assert np.isfinite(y).all(), f"{name}: non-finite result at {x[~np.isfinite(y)][:5]}"
    return np.abs(y - r) / ulp32(r)


def linear_grid(lo: float, hi: float, n: int) -> np.ndarray:
    """n float32 values evenly spaced on [lo, hi] (duplicates removed)."""
    return np.unique(np.linspace(lo, hi, n, dtype=np.float64).astype(np.float32))


def binade_grid(lo: float, hi: float, n: int) -> np.ndarray:
    """n positive float32 values evenly spaced in their bit patterns between lo > 0 and hi: the same
    density in every binade, so tiny and huge magnitudes are covered as well as ordinary ones."""
    a = int(np.float32(lo).view(np.int32))
    b = int(np.float32(hi).view(np.int32))
    bits = np.unique(np.linspace(a, b, n).round().astype(np.int64)).astype(np.int32)
    return bits.view(np.float32)


def every_float(lo: float, hi: float) -> np.ndarray:
    """Every float32 in [lo, hi] (0 <= lo <= hi)."""
    a = int(np.float32(lo).view(np.int32))
    b = int(np.float32(hi).view(np.int32))
    return np.arange(a, b + 1, dtype=np.int64).astype(np.int32).view(np.float32)


def both_signs(x: np.ndarray) -> np.ndarray:
    """x and -x together."""
    return np.concatenate([x, -x])


def near_zeros(offset: float, limit: float, spread: int = 64) -> np.ndarray:
    """The float32 values within `spread` ulps of every (k + offset) * pi with 0 < |.| <= limit: the
    inputs where sin (offset 0) or cos (offset 0.5) is closest to zero."""
    k = np.arange(0, int(limit / np.pi) + 2, dtype=np.float64)
    centre = ((k + offset) * np.pi).astype(np.float32)
    centre = centre[(centre > 0) & (centre <= limit)]
    bits = centre.view(np.int32)[:, None] + np.arange(-spread, spread + 1, dtype=np.int32)[None, :]
    x = bits.ravel().view(np.float32)
    return both_signs(x[(x > 0) & (x <= limit)])


def assert_max_ulp(name: str, x: np.ndarray, ref: Ref, bound: float) -> float:
    """Assert that every error on x is within bound ulps; returns the largest error."""
    e = ulp_errors(name, x, ref)
    i = int(np.argmax(e))
    assert e[i] <= bound, (
        f"{name}({x[i]!r}) is {e[i]:.3f} ulp off (bound {bound}); {int((e > bound).sum())} of {e.size} inputs exceed it"
    )
    return float(e[i])


# ---- accuracy on dense grids ----


def test_exp_accuracy() -> None:
    """exp within 1.5 ulp over its whole documented finite range [-86, 88.5]."""
    x = np.concatenate(
        [
            linear_grid(-86.0, 88.5, 1_500_000),
            both_signs(binade_grid(2.0**-40, 86.0, 600_000)),
            binade_grid(86.0, 88.5, 100_000),
            linear_grid(-1.0, 1.0, 200_000),
            np.float32([-86.0, 88.5, 0.0, 1.0, -1.0]),
        ]
    )
    assert_max_ulp("exp", x, np.exp, 1.5)


def test_log_accuracy() -> None:
    """log within 1.5 ulp for every positive finite float, subnormals included, densest near 1."""
    x = np.concatenate(
        [
            binade_grid(FLT_TRUE_MIN, 3.4028235e38, 1_500_000),
            linear_grid(0.5, 2.0, 500_000),
            every_float(1.0 - 2.0**-12, 1.0 + 2.0**-12),
            np.float32([FLT_TRUE_MIN, 2.0**-126, 3.4028235e38, 2.0, 0.5]),
        ]
    )
    assert_max_ulp("log", x, np.log, 1.5)


def test_log1p_accuracy() -> None:
    """log1p within 2.5 ulp on (-1, inf): tiny arguments, near -1, and large arguments."""
    x = np.concatenate(
        [
            both_signs(binade_grid(2.0**-140, 0.999, 1_000_000)),
            binade_grid(1.0, 3.4e38, 500_000),
            linear_grid(-0.99999994, 10.0, 800_000),
            every_float(0.0625 - 2.0**-12, 0.0625 + 2.0**-12),
        ]
    )
    x = x[x > -1.0]
    assert_max_ulp("log1p", x, np.log1p, 2.5)


def test_tanh_accuracy() -> None:
    """tanh within 1.5 ulp on all reals: tiny, around the 0.625 switch of formula, and saturated."""
    x = np.concatenate(
        [
            linear_grid(-12.0, 12.0, 1_500_000),
            both_signs(binade_grid(2.0**-140, 1e30, 800_000)),
            both_signs(every_float(0.625 - 2.0**-10, 0.625 + 2.0**-10)),
        ]
    )
    assert_max_ulp("tanh", x, np.tanh, 1.5)


@pytest.mark.parametrize("name,ref", [("sin", np.sin), ("cos", np.cos)])
def test_trig_small_argument_accuracy(name: str, ref: Ref) -> None:
    """sin and cos within 1.5 ulp for |x| <= pi (one period around 0, zeros included)."""
    x = np.concatenate(
        [
            linear_grid(-SMALL_TRIG, SMALL_TRIG, 1_500_000),
            both_signs(binade_grid(2.0**-140, SMALL_TRIG, 800_000)),
            near_zeros(0.0 if name == "sin" else 0.5, SMALL_TRIG),
        ]
    )
    x = x[np.abs(x) <= SMALL_TRIG]
    assert_max_ulp(name, x, ref, 1.5)


@pytest.mark.parametrize("name,ref", [("sin", np.sin), ("cos", np.cos)])
def test_trig_large_argument_accuracy(name: str, ref: Ref) -> None:
    """sin and cos within 2.5 ulp for pi < |x| <= 8192, except that near their zeros the error is
    absolute: at most 2.5 ulp plus |x| * 2^-53 (what a pi/2 carried to double precision in the
    argument reduction leaves), far below the float32 spacing of x itself."""
    x = np.concatenate(
        [
            both_signs(linear_grid(SMALL_TRIG, TRIG_LIMIT, 1_500_000)),
            both_signs(binade_grid(SMALL_TRIG, TRIG_LIMIT, 500_000)),
            both_signs(every_float(TRIG_LIMIT - 2.0**-8, TRIG_LIMIT)),
        ]
    )
    x = x[np.abs(x) > SMALL_TRIG]
    e = ulp_errors(name, x, ref)
    r = ref(x.astype(np.float64))
    far = np.abs(r) >= 2.0**-10
    assert e[far].max() <= 2.5, f"{name}: {e[far].max():.3f} ulp at {x[far][np.argmax(e[far])]!r}"

    z = near_zeros(0.0 if name == "sin" else 0.5, TRIG_LIMIT)
    z = z[np.abs(z) > SMALL_TRIG]
    y = _core.math_eval(name, z).astype(np.float64)
    rz = ref(z.astype(np.float64))
    err = np.abs(y - rz)
    allowed = 2.5 * ulp32(rz) + np.abs(z.astype(np.float64)) * 2.0**-53
    bad = err > allowed
    assert not bad.any(), (
        f"{name}: {int(bad.sum())} inputs near zeros exceed 2.5 ulp + |x| 2^-53, e.g. "
        f"x={z[bad][0]!r}: error {err[bad][0]:.3g}, allowed {allowed[bad][0]:.3g}"
    )


def test_sqrt_soft_bit_exact() -> None:
    """The integer-only mct_sqrtf_soft equals IEEE float32 sqrt bit for bit: every subnormal, every
    float in [1, 4) (both exponent parities), and a dense sweep of all positive floats."""
    x = np.concatenate(
        [
            every_float(0.0, 2.0**-126),  # 0, all subnormals, FLT_MIN
            every_float(1.0, 4.0),
            binade_grid(2.0**-126, 3.4028235e38, 2_000_000),
            np.float32([np.inf, 3.4028235e38, 1.0 - 2.0**-24, 2.0 - 2.0**-23]),
        ]
    )
    got = _core.math_eval("sqrt_soft", x)
    want = np.sqrt(x)
    diff = got.view(np.uint32) != want.view(np.uint32)
    assert not diff.any(), f"sqrt_soft differs at {x[diff][:5]}: {got[diff][:5]} vs {want[diff][:5]}"


@pytest.mark.parametrize("name", ["sqrt", "sqrt_soft"])
def test_sqrt_special_values(name: str) -> None:
    """sqrt of -0 is -0, of +inf +inf, of negatives and NaN a NaN."""
    x = np.float32([0.0, -0.0, np.inf, -1.0, -FLT_TRUE_MIN, -np.inf, np.nan])
    y = _core.math_eval(name, x)
    assert y[0] == 0.0 and not np.signbit(y[0])
    assert y[1] == 0.0 and np.signbit(y[1])
    assert y[2] == np.inf
    assert np.isnan(y[3:]).all()


# ---- special values ----


def f32(*v: float) -> np.ndarray:
    """A float32 array of the given values."""
    return np.array(v, dtype=np.float32)


def test_exp_special_values() -> None:
    """exp: 0 far below and +inf far above the range, the documented cut-offs, exact 1 at 0, NaN kept."""
    y = _core.math_eval("exp", f32(-100.0, 100.0, -np.inf, np.inf, 0.0, -0.0, np.nan, -86.001, 88.501, -1e30, 1e30))
    assert y[0] == 0.0 and y[2] == 0.0 and y[7] == 0.0 and y[9] == 0.0
    assert y[1] == np.inf and y[3] == np.inf and y[8] == np.inf and y[10] == np.inf
    assert y[4] == 1.0 and y[5] == 1.0
    assert np.isnan(y[6])
    # at the edges of the range the results are normal floats, not 0 or inf
    e = _core.math_eval("exp", f32(-86.0, 88.5))
    assert 2.0**-126 <= e[0] < 1e-37 and np.isfinite(e[1]) and e[1] > 1e38


def test_log_special_values() -> None:
    """log: -inf at +-0, NaN below 0, +inf at +inf, exact 0 at 1, NaN kept."""
    y = _core.math_eval("log", f32(0.0, -0.0, -1.0, -FLT_TRUE_MIN, -np.inf, np.inf, 1.0, np.nan))
    assert y[0] == -np.inf and y[1] == -np.inf
    assert np.isnan(y[2]) and np.isnan(y[3]) and np.isnan(y[4])
    assert y[5] == np.inf
    assert y[6] == 0.0
    assert np.isnan(y[7])


def test_log1p_special_values() -> None:
    """log1p: -inf at -1, NaN below -1, +-0 kept, +inf at +inf, NaN kept."""
    y = _core.math_eval("log1p", f32(-1.0, -2.0, -np.inf, 0.0, -0.0, np.nan, 1e-30, np.inf))
    assert y[0] == -np.inf
    assert np.isnan(y[1]) and np.isnan(y[2])
    assert y[3] == 0.0 and not np.signbit(y[3])
    assert y[4] == 0.0 and np.signbit(y[4])
    assert np.isnan(y[5])
    assert y[6] == np.float32(1e-30)
    assert y[7] == np.inf, f"log1p(+inf) = {y[7]}"


def test_tanh_special_values() -> None:
    """tanh: +-1 at +-inf and for large arguments, the argument itself for tiny ones, NaN kept."""
    y = _core.math_eval("tanh", f32(np.inf, -np.inf, 20.0, -20.0, 0.0, 1e-30, -1e-30, np.nan))
    assert y[0] == 1.0 and y[1] == -1.0 and y[2] == 1.0 and y[3] == -1.0
    assert y[4] == 0.0
    assert y[5] == np.float32(1e-30) and y[6] == np.float32(-1e-30)
    assert np.isnan(y[7])


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_trig_special_values(name: str) -> None:
    """sin/cos: NaN for NaN and +-inf; sin(0) = 0, cos(0) = 1 exactly; tiny arguments exact."""
    y = _core.math_eval(name, f32(np.nan, np.inf, -np.inf, 0.0, 1e-20))
    assert np.isnan(y[:3]).all()
    if name == "sin":
        assert y[3] == 0.0 and y[4] == np.float32(1e-20)
    else:
        assert y[3] == 1.0 and y[4] == 1.0


@pytest.mark.parametrize("name", ["exp", "log", "log1p", "tanh", "sin", "cos", "sqrt", "sqrt_soft"])
def test_nan_propagates(name: str) -> None:
    """A NaN argument (quiet, signalling-pattern or negative) gives a NaN."""
    x = np.array([0x7FC00000, 0xFFC00000, 0x7FA00000, 0x7F800001], dtype=np.uint32).view(np.float32)
    assert np.isnan(_core.math_eval(name, x)).all()


def test_ulp_measure() -> None:
    """The ulp scale used above: 1 at 1.0 is 2^-23, just below 1.0 2^-24, subnormals 2^-149."""
    u = ulp32(np.array([1.0, 1.0 - 2.0**-30, 3.0, 2.0**-126, 2.0**-130, 0.0, -2.0]))
    assert list(u) == [2.0**-23, 2.0**-24, 2.0**-22, 2.0**-149, 2.0**-149, 2.0**-149, 2.0**-22]
