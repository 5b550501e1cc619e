"""The host's exact model of an exported device: the device's own layer table (frozen layers in
flash, quantized layers included) run by the same C core, with the device's buffers (RAM parameters,
optimizer slots, train state), predicting and training as the device does. After the same steps from
the same export, its buffers equal what Device.pull() returns, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np

from mcutrain.corefacts import TRAIN_STATE_DTYPE, Status, train_state_init

from .device_model import DeviceModel


class DeviceTwin:
    """What a freshly booted device running `model` holds and computes."""

    def __init__(self, model: DeviceModel) -> None:
        self.model = model
        self.core = model.core()
        n = model.program.n_params
        self._params = np.array(model.params, np.float32, copy=True)
        self._state = np.zeros(model.opt_slots * n, np.float32)
        self._ts = train_state_init().view(np.uint8)

    @property
    def n_params(self) -> int:
        """Parameters the device keeps in RAM."""
        return self.model.program.n_params

    @property
    def params(self) -> np.ndarray:
        """The RAM parameters (a view: writes change the twin)."""
        return self._params

    @property
    def state(self) -> np.ndarray:
        """The optimizer slots, flat as the device's region 1 (a view)."""
        return self._state

    @property
    def train_state(self) -> np.ndarray:
        """The bytes of the train state (struct mct_train_state: step, Adam powers), as the device's region 2."""
        return self._ts

    @property
    def step(self) -> int:
        """Training steps done."""
        return int(self._ts.view(TRAIN_STATE_DTYPE)["step"][0])

    def predict(self, x: Any) -> np.ndarray:
        """Outputs for one sample (n_in,) or a batch (n, n_in), as PREDICT gives them."""
        xa = np.asarray(x, np.float32)
        y = self.core.forward(self._params, np.ascontiguousarray(xa.reshape(-1, self.model.program.n_in)))
        return y if xa.ndim > 1 else y[0]

    def features(self, raw: Any) -> np.ndarray:
        """The network inputs (normalised features) of raw windows, as the device's FEATURES gives them."""
        fe = self.model.feat
        if fe is None:
            raise ValueError("this model has no feature pipeline: it takes its inputs as they are")
        one = np.asarray(raw).ndim == len(fe.spec.window_shape)
        x = fe.inputs(raw)
        return x[0] if one else x

    def predict_raw(self, raw: Any) -> np.ndarray:
        """Outputs for raw windows, as PREDICT_RAW gives them."""
        return self.predict(self.features(raw))

    def train_raw(self, raw: Any, t: Any) -> float:
        """One TRAIN_RAW step on a raw window and its target."""
        return self.train(self.features(raw), t)

    def train(self, x: Any, t: Any) -> float:
        """One TRAIN step on one labelled sample (the device's fused update); returns the loss.
        ValueError if the device would refuse it (a loss, input or target that is not finite, or a frozen
        full-integer model that takes int8 at its boundary: it trains nothing)."""
        m = self.model
        if m.int8_io:
            raise ValueError(
                "the device refuses this step (status UNSUPPORTED): the model is frozen and full-integer, it trains "
                "nothing; export it with --trainable to train on the device"
            )
        xs = np.ascontiguousarray(np.asarray(x, np.float32).reshape(1, m.program.n_in))
        ts = np.ascontiguousarray(np.asarray(t, np.float32).reshape(1, m.program.n_out))
        rc, loss = self.core.train_fused(
            m.opt_cfg.view(np.uint8), self._ts, self._params, self._state, m.loss_kind, m.loss_param, xs, ts
        )
        if rc != Status.OK:
            raise ValueError(f"the device refuses this step (status {Status(rc).name}: not finite)")
        return float(loss)

    def load(self, params: Any, state: Any = None, train_state: Any = None) -> None:
        """Set the buffers, as Device.push does on the device."""
        self.params[...] = np.asarray(params, np.float32).ravel()
        if state is not None and self.state.size:
            self.state[...] = np.asarray(state, np.float32).ravel()
        if train_state is not None:
            self._ts[...] = np.frombuffer(np.asarray(train_state).tobytes(), np.uint8)
