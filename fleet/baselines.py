"""What a fleet is measured against: each device training alone on its own shard, and centralised training
on all the shards pooled, with the same on-device update (the host's twin of the device: the same C core,
the same bits) and the same sample order a fleet device uses. Also the order itself."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from mcutrain.exporter.device_model import DeviceModel
from mcutrain.exporter.twin import DeviceTwin
from mcutrain.sources import metrics


def local_order(seed: int, index: int, server_round: int, n: int, steps: int) -> np.ndarray:
    """The samples device `index` trains on in a round: seeded passes over its n samples in random order,
    `steps` of them."""
    rng = np.random.default_rng([seed, index, server_round])
    passes = -(-steps // n)
    return np.concatenate([rng.permutation(n) for _ in range(passes)])[:steps]


def train_twin(model: DeviceModel, x: np.ndarray, y: np.ndarray, rounds: int, steps: int, seed: int, index: int) -> Any:
    """A device twin trained alone: `rounds` rounds of `steps` TRAIN steps in the fleet's sample order."""
    twin = DeviceTwin(model)
    for r in range(1, rounds + 1):
        for i in local_order(seed, index, r, x.shape[0], steps):
            twin.train(x[i], y[i])
    return twin


def evaluate_params(model: DeviceModel, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> Dict[str, float]:
    """Loss (and accuracy for class targets) of the device's RAM parameters on (x, y), on the host."""
    from mcutrain.exporter.quantize import loss_of_model

    out = model.core().forward(np.asarray(params, np.float32), np.ascontiguousarray(x, np.float32))
    return metrics(out, y, loss_of_model(model.loss_kind, model.loss_param), y.shape[1] > 1)


def compare(
    model: DeviceModel,
    shards: List[tuple],
    test: tuple,
    rounds: int,
    steps: int,
    seed: int = 0,
) -> Dict[str, Any]:
    """{'alone': [metrics of each device trained alone], 'centralised': metrics of one twin trained on the
    pooled shards for as many steps as the whole fleet takes} on the test set (x, y)."""
    alone = []
    for i, (x, y) in enumerate(shards):
        twin = train_twin(model, x, y, rounds, steps, seed, i)
        alone.append(evaluate_params(model, twin.params, *test))
    px = np.concatenate([x for x, _ in shards])
    py = np.concatenate([y for _, y in shards])
    central = train_twin(model, px, py, rounds, steps * len(shards), seed, len(shards))
    return {"alone": alone, "centralised": evaluate_params(model, central.params, *test)}
