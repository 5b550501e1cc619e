"""A float64 NumPy re-derivation of every layer's forward pass and every loss, written from the
documented semantics (scratch context / layer docstrings), NOT from the C core. Used only by tests
as an independent oracle: the C core's float32 results and gradients are compared against it.

Parameters follow the documented flat layout: a composition's parameters are its children's,
concatenated in order; each layer's own slice is laid out as its docstring says.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

import numpy as np

from mcutrain import compose, layers
from mcutrain.module import Module

Array = np.ndarray


def sigmoid(z: Array) -> Array:
    """Logistic function, overflow-free in float64."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _gate(name: str, z: Array, alpha: float, beta: Optional[Array], kinks: Optional[List[Array]]) -> Array:
    """GLU gate / activation `name` at z; records z in kinks for the piecewise-linear ones."""
    if name in ("relu", "leaky_relu") and kinks is not None:
        kinks.append(np.abs(z).ravel())
    if name == "sigmoid":
        return sigmoid(z)
    if name == "relu":
        return np.where(z > 0, z, 0.0)
    if name == "leaky_relu":
        return np.where(z < 0, alpha * z, z)
    if name == "tanh":
        return np.tanh(z)
    if name == "silu":
        return z * sigmoid(z)
    if name == "softplus":
        return np.logaddexp(0.0, z)
    if name == "swish":
        assert beta is not None
        return z * sigmoid(beta * z)
    raise ValueError(name)


_ACTS: Dict[type, Callable[[Array], Array]] = {
    layers.Sigmoid: sigmoid,
    layers.Tanh: np.tanh,
    layers.SiLU: lambda x: x * sigmoid(x),
    layers.Softplus: lambda x: np.logaddexp(0.0, x),
    layers.Sine: np.sin,
    layers.Cosine: np.cos,
}


def forward(m: Module, p: Array, x: Array, kinks: Optional[List[Array]] = None) -> Array:
    """Output (nb, n_out) of module m with flat float64 parameters p on float64 input x (nb, n_in).

    If `kinks` is a list, the arguments of every non-differentiable point (ReLU / leaky ReLU inputs)
    are appended to it, so a test can make sure finite differences stay clear of them.
    """
    p = np.asarray(p, np.float64)
    x = np.asarray(x, np.float64)
    assert p.shape == (m.param_count(),), (m.describe(), p.shape)
    # ---- compositions
    if isinstance(m, compose.Sequential):
        off = 0
        for c in m.modules:
            n = c.param_count()
            x = forward(c, p[off : off + n], x, kinks)
            off += n
        return x
    if isinstance(m, compose.Residual):
        n = m.inner.param_count()
        if m.shortcut is not None:
            return forward(m.inner, p[:n], x, kinks) + forward(m.shortcut, p[n:], x, kinks)
        return x + forward(m.inner, p, x, kinks)
    if isinstance(m, compose.LR):
        return forward(m.inner, p, x, kinks)  # the divisor only changes the learning rate
    # ---- parameterized layers
    if isinstance(m, layers.Dense):
        return x @ p.reshape(m.n_in, m.n_out)
    if isinstance(m, layers.Linear):
        io = m.n_in * m.n_out
        return x @ p[:io].reshape(m.n_in, m.n_out) + p[io:]
    if isinstance(m, layers.Bias1d):
        return x + p
    if isinstance(m, layers.Swish):
        return x * sigmoid(p * x)
    if isinstance(m, layers.Diag):
        return p * x
    if isinstance(m, layers.ScalarScale):
        return p[0] * x
    if isinstance(m, layers.RMSNorm):
        r = np.sqrt(np.mean(x * x, axis=1, keepdims=True) + m.eps)
        return p * x / r
    if isinstance(m, layers.DyT):
        n = m.n_in
        return p[1 : 1 + n] * np.tanh(p[0] * x) + p[1 + n :]
    if isinstance(m, layers.SingleChannelConv1d):
        f, o = m.filter_size, m.n_out
        return sum(p[k] * x[:, k : k + o] for k in range(f))
    if isinstance(m, layers.GLU):
        i, o = m.n_in, m.n_out
        io = i * o
        wg, wv = p[:io].reshape(i, o), p[io : 2 * io].reshape(i, o)
        bg, bv = p[2 * io : 2 * io + o], p[2 * io + o : 2 * io + 2 * o]
        beta = p[2 * io + 2 * o :] if m.gate == "swish" else None
        return _gate(m.gate, x @ wg + bg, m.alpha, beta, kinks) * (x @ wv + bv)
    # ---- spatial layers (channels last; windows as documented in mct.h, "Spatial ops")
    if isinstance(
        m, (layers.Conv2d, layers.DepthwiseConv2d, layers.MaxPool2d, layers.AvgPool2d, layers.GlobalAvgPool2d)
    ):
        return _spatial(m, p, x, kinks)
    if isinstance(m, layers.BatchNorm):  # running statistics (the inference form)
        c = m.channels
        g, b, mean, var = p[:c], p[c : 2 * c], p[2 * c : 3 * c], p[3 * c :]
        xs = x.reshape(x.shape[0], -1, c)
        return (g * (xs - mean) / np.sqrt(var + m.eps) + b).reshape(x.shape)
    if isinstance(m, (layers.Flatten, layers.Dropout)):  # Dropout: the inference form
        return x
    # ---- parameter-free layers
    if isinstance(m, layers.Relu6):
        if kinks is not None:
            kinks.append(np.abs(x).ravel())
            kinks.append(np.abs(x - 6.0).ravel())
        return np.clip(x, 0.0, 6.0)
    if isinstance(m, layers.Relu):
        return _gate("relu", x, 0.0, None, kinks)
    if isinstance(m, layers.LeakyRelu):
        return _gate("leaky_relu", x, m.alpha, None, kinks)
    if isinstance(m, layers.Softmax):
        z = x / m.temperature
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    for cls, fn in _ACTS.items():
        if isinstance(m, cls):
            return fn(x)
    raise NotImplementedError(f"oracle has no forward for {m.describe()}")


def _spatial(m: Module, p: Array, x: Array, kinks: Optional[List[Array]]) -> Array:
    """Convolutions and pooling from their geometry: every output position's window of kh x kw taps starts at
    (oy sh - pt, ox sw - pl); taps outside the input are left out (not zeros)."""
    g = m._geometry()
    hi, wi, ci, ho, wo, co = (int(g[k]) for k in ("h_in", "w_in", "c_in", "h_out", "w_out", "c_out"))
    kh, kw, sh, sw, pt, pl = (int(g[k]) for k in ("kh", "kw", "sh", "sw", "pt", "pl"))
    nb = x.shape[0]
    xs = x.reshape(nb, hi, wi, ci)
    y = np.zeros((nb, ho, wo, co))
    for oy in range(ho):
        for ox in range(wo):
            rows = [oy * sh - pt + k for k in range(kh) if 0 <= oy * sh - pt + k < hi]
            cols = [ox * sw - pl + k for k in range(kw) if 0 <= ox * sw - pl + k < wi]
            win = xs[:, rows][:, :, cols]  # (nb, r, c, ci)
            kr = [r - (oy * sh - pt) for r in rows]
            kc = [c - (ox * sw - pl) for c in cols]
            if isinstance(m, layers.Conv2d):
                w = p[: kh * kw * ci * co].reshape(kh, kw, ci, co)[kr][:, kc]
                y[:, oy, ox] = np.einsum("nrci,rcio->no", win, w) + (p[kh * kw * ci * co :] if m.bias else 0.0)
            elif isinstance(m, layers.DepthwiseConv2d):
                mult = co // ci
                w = p[: kh * kw * co].reshape(kh, kw, co)[kr][:, kc]
                xin = np.repeat(win, mult, axis=3)  # output channel o reads input channel o // mult
                y[:, oy, ox] = np.einsum("nrco,rco->no", xin, w) + (p[kh * kw * co :] if m.bias else 0.0)
            elif isinstance(m, layers.MaxPool2d):
                flat = win.reshape(nb, -1, ci)
                y[:, oy, ox] = flat.max(axis=1)
                if kinks is not None and flat.shape[1] > 1:
                    top2 = np.sort(flat, axis=1)[:, -2:]
                    kinks.append((top2[:, 1] - top2[:, 0]).ravel())
            else:  # average pooling, global or windowed
                y[:, oy, ox] = win.reshape(nb, -1, ci).mean(axis=1)
    return y.reshape(nb, -1)


# ---------------------------------------------------------------- losses (per sample)


def loss_per_sample(name: str, y: Array, t: Array, beta: float = 1.0) -> Array:
    """Loss of each sample (nb,) for y, t (nb, n), float64, as documented for mcutrain.losses."""
    y = np.asarray(y, np.float64)
    t = np.asarray(t, np.float64)
    n = y.shape[1]
    if name == "mse":
        return np.mean((y - t) ** 2, axis=1)
    if name == "huber":
        a = np.abs(y - t)
        return np.mean(np.where(a < beta, 0.5 * a * a, beta * (a - 0.5 * beta)), axis=1)
    if name == "logit_bce":
        # 1 - 1e-7 is not a float32; the nearest one (1 - 2^-23) is the clamp a float32 core can use
        q = np.clip(y, 1e-7, float(np.float32(1.0 - 1e-7)))
        return -np.sum(t * np.log(q) + (1.0 - t) * np.log(1.0 - q), axis=1) / n
    if name == "cross_entropy":
        return -np.sum(t * np.log(np.maximum(y, 1e-30)), axis=1)
    if name == "cosine":
        ny, nt = np.linalg.norm(y, axis=1), np.linalg.norm(t, axis=1)
        ok = (ny > 0) & (nt > 0)
        c = np.sum(y * t, axis=1) / np.where(ok, ny * nt, 1.0)
        return np.where(ok, 1.0 - c, 1.0)
    raise ValueError(name)


# ---------------------------------------------------------------- finite differences


def central_diff(f: Callable[[Array], float], v: Array, h: float = 1e-6) -> Array:
    """Central finite-difference gradient of scalar f at v (any shape), in float64."""
    v = np.array(v, np.float64)
    flat = v.ravel()
    g = np.empty_like(flat)
    for j in range(flat.size):
        old = flat[j]
        flat[j] = old + h
        fp = f(v)
        flat[j] = old - h
        fm = f(v)
        flat[j] = old
        g[j] = (fp - fm) / (2.0 * h)
    return g.reshape(v.shape)
