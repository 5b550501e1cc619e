#!/usr/bin/env bash
# Set up mcutrain on Debian/Ubuntu: cross compilers and simulators (apt, when run as root or with
# sudo), then mcutrain itself in the current Python environment (pip install -e, which builds the
# C extension). Safe to run again. An argument names the extras to install with it (scripts/test.sh
# passes "test"); without one only the base install (train, export, build, sim, flash) is set up.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(gcc make gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm qemu-system-misc
              gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf gcc-avr avr-libc simavr libsimavr-dev
              arduino-core-avr)
APT_PACKAGES+=(clang libclang-rt-14-dev)  # libFuzzer and the sanitizer runtimes: bench/fuzz.py, tests/test_fuzz.py
APT_PACKAGES+=(espeak-ng sox)  # the synthesized spoken-word data set: mcutrain.wordsynth, tests/test_wordsynth.py

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else SUDO="none"; fi
    if [ "$SUDO" = "none" ] || ! command -v apt-get >/dev/null; then
        echo "mcutrain setup: please install these packages yourself: ${missing[*]}" >&2
    else
        echo "mcutrain setup: installing ${missing[*]}"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
fi

PY=${PYTHON:-python3}
"$PY" -m pip install -q --upgrade pip >/dev/null
# the test extra pins torch==2.13.0 (it writes the ONNX files of the import tests): the CPU build this machine
# class keeps on disk; an unpinned torch would download a CUDA build of several GB
extras=${1:-}
"$PY" -m pip install -q -e ".${extras:+[$extras]}"
echo "mcutrain setup: done ($("$PY" -c 'import mcutrain; print("mcutrain", mcutrain.__version__)'))"
