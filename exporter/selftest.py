"""The on-target self-test of an exported project (`pio test -e ENV`): the expected bits it checks.

test/test_model/test_main.c (copied from firmware/template/test/) runs on the target, natively or in the
board's simulator, and compares what the device computes with test/test_model/expected.h, generated here
from the host's C core running the device's own layer table (DeviceModel.core()):
  - a few fixed inputs and the exact output bits of PREDICT from the exported parameters;
  - TRAIN steps from the exported state (fresh optimizer state, step 0) on fixed labelled samples, one
    after another: per step the status, the loss bits, the step counter, the CRC-32 (zlib's) of all RAM
    parameters and of the optimizer slots, and the bits of a few parameters the first step changes;
  - the model hash, so a stale expected.h is reported as such.
Everything is deterministic (fixed inputs, same model, same bytes)."""
from __future__ import annotations

import zlib
from typing import List, Sequence

import numpy as np

from trainer import __version__
from trainer.optim import TRAIN_STATE_DTYPE

from .cgen import DeviceModel

N_PREDICT = 3          # PREDICT samples
N_TRAIN = 2            # TRAIN steps, one after another (the second uses the optimizer state of the first)
N_PROBES = 4           # parameters whose bits are compared after every step
SEED = 0x6D637421      # the fixed inputs' generator ("mct!")


def _bits(values: np.ndarray) -> List[int]:
    """The float32 bit patterns of values."""
    return [int(v) for v in np.ascontiguousarray(values, np.float32).reshape(-1).view("<u4")]


def _words(values: Sequence[int], per_line: int = 6, indent: str = "    ") -> str:
    """C initializer lines of 32-bit hex words."""
    vals = [f"0x{int(v) & 0xFFFFFFFF:08x}u" for v in values] or ["0x00000000u"]
    return "\n".join(indent + ", ".join(vals[i:i + per_line]) + "," for i in range(0, len(vals), per_line))


def _array(name: str, rows: Sequence[Sequence[int]], comment: str) -> str:
    """A 2-D const array of 32-bit words in MCT_CONST memory (flash; PROGMEM on AVR)."""
    width = max(1, max((len(r) for r in rows), default=1))
    body = "\n".join("    {\n" + _words(r, indent="        ") + "\n    }," for r in rows)
    return (f"/* {comment} */\nstatic const uint32_t {name}[{len(rows)}][{width}] MCT_CONST = {{\n{body}\n}};\n")


def _vector(name: str, values: Sequence[int], comment: str) -> str:
    """A 1-D const array of 32-bit words in MCT_CONST memory."""
    return (f"/* {comment} */\nstatic const uint32_t {name}[{max(len(values), 1)}] MCT_CONST = {{\n"
            f"{_words(values)}\n}};\n")


def fixed_inputs(m: DeviceModel) -> np.ndarray:
    """The fixed inputs (N_PREDICT, n_in): uniform in [-1, 1) from a fixed seed."""
    rng = np.random.default_rng(SEED)
    return rng.uniform(-1.0, 1.0, (N_PREDICT, m.program.n_in)).astype(np.float32)


def fixed_targets(m: DeviceModel) -> np.ndarray:
    """The TRAIN targets (N_TRAIN, n_out): one-hot (valid for every loss); step s trains on input s."""
    t = np.zeros((N_TRAIN, m.program.n_out), np.float32)
    for s in range(N_TRAIN):
        t[s, s % m.program.n_out] = 1.0
    return t


def probe_indices(before: np.ndarray, after: np.ndarray) -> List[int]:
    """Up to N_PROBES parameter indices, spread over the ones the first step changed (the first and the last
    included); the first and last parameter when none changed; none without parameters."""
    n = len(before)
    if n == 0:
        return []
    changed = np.flatnonzero(before.view("<u4") != after.view("<u4"))
    pool = changed if len(changed) else np.array([0, n - 1])
    picks = np.unique(pool[np.linspace(0, len(pool) - 1, min(N_PROBES, len(pool))).round().astype(int)])
    return [int(i) for i in picks]


def expected_h(m: DeviceModel) -> str:
    """test/test_model/expected.h: what the device must compute, bit for bit (see the module docstring)."""
    p = m.program
    core = m.core()
    n_params = p.n_params
    x = fixed_inputs(m)
    t = fixed_targets(m)
    init = np.concatenate([m.params, np.zeros(1, np.float32)]).astype(np.float32)
    y = np.stack([np.asarray(core.forward(init.copy(), x[i:i + 1]), np.float32).reshape(-1)
                  for i in range(N_PREDICT)])
    params = init.copy()
    n_state = m.opt_slots * n_params
    state = np.zeros(max(n_state, 1), np.float32)
    ts = np.zeros(1, TRAIN_STATE_DTYPE)
    ts["b1t"] = 1
    ts["b2t"] = 1
    ts_u8 = ts.view(np.uint8)
    opt = m.opt_cfg.view(np.uint8)
    rcs: List[int] = []
    losses: List[float] = []
    steps: List[int] = []
    crc_p: List[int] = []
    crc_s: List[int] = []
    after: List[np.ndarray] = []
    for s in range(N_TRAIN):
        rc, loss = core.train_fused(opt, ts_u8, params, state, m.loss_kind, m.loss_param,
                                    np.ascontiguousarray(x[s:s + 1]), np.ascontiguousarray(t[s:s + 1]))
        rcs.append(int(rc))
        losses.append(float(loss))
        steps.append(int(ts_u8.view(TRAIN_STATE_DTYPE)["step"][0]))
        crc_p.append(zlib.crc32(params[:n_params].tobytes()))
        crc_s.append(zlib.crc32(state[:n_state].tobytes()))
        after.append(params[:n_params].copy())
    probes = probe_indices(init[:n_params], after[0])
    hash_bytes = ", ".join(f"0x{b:02x}" for b in m.hash())
    parts = [
        f"/* expected.h - generated by mcutrain {__version__} from {m.source}; do not edit.\n"
        " * What the on-target self-test (test_main.c, `pio test -e ENV`) must compute, bit for bit: the host's C\n"
        " * core ran the device's layer table (DeviceModel.core()) on these fixed samples. Floats are given\n"
        " * as their IEEE-754 bit patterns. */",
        "#ifndef MCT_TEST_EXPECTED_H\n#define MCT_TEST_EXPECTED_H\n\n#include \"model.h\"\n",
        f"#define MCT_TEST_N_PREDICT {N_PREDICT}\n#define MCT_TEST_N_TRAIN {N_TRAIN}\n"
        f"#define MCT_TEST_N_PROBES {len(probes)}\n",
        "/* the model these values belong to (mct_model_hash); in RAM like mct_model_hash: avr-gcc's link-time\n"
        " * optimization would merge the two identical arrays into one, in flash, if this one were PROGMEM */\n"
        f"static const uint8_t mct_test_hash[8] = {{{hash_bytes}}};\n",
        _array("mct_test_x", [_bits(r) for r in x], "inputs (PREDICT sample i; TRAIN step s uses input s)"),
        _array("mct_test_y", [_bits(r) for r in y], "PREDICT outputs with the exported parameters"),
        _array("mct_test_t", [_bits(r) for r in t], "TRAIN targets, one per step"),
        _vector("mct_test_rc", rcs, "status of mct_train_step per step (MCT_OK = 0)"),
        _vector("mct_test_loss", _bits(np.array(losses, np.float32)), "loss per step"),
        _vector("mct_test_step", steps, "train state's step counter after each step"),
        _vector("mct_test_params_crc", crc_p, "CRC-32 (zlib) of the MCT_MODEL_N_PARAMS parameters after each step"),
        _vector("mct_test_state_crc", crc_s,
                "CRC-32 (zlib) of the MCT_MODEL_N_PARAMS * MCT_MODEL_SLOTS optimizer slots after each step"),
        _vector("mct_test_probe_index", probes, "parameters compared bit for bit after each step"),
        _array("mct_test_probe", [_bits(a[probes]) if probes else [] for a in after],
               "their bits after each step"),
        "#endif /* MCT_TEST_EXPECTED_H */\n",
    ]
    return "\n".join(parts)
