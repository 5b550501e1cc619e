#!/usr/bin/env bash
# The whole path on the built-in example, without hardware: set up, train (ModularAddition10),
# export for an STM32 Nucleo-F401RE (Cortex-M4F), build the firmware, run it in QEMU, and check
# that the device's predictions and a training step match the host's bit for bit.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh   # the base install only: no PyTorch, Keras, JAX or Flower
out=${1:-demo}
mkdir -p "$out"
set -x
mcutrain train -o "$out/model.mct" --force
mcutrain export "$out/model.mct" --board nucleo_f401re -o "$out/fw" --force
mcutrain sim "$out/fw" --report "$out/report.json" --force
