#!/usr/bin/env bash
# Set up (scripts/setup.sh with the test extra) and run every test. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh test
PY=${PYTHON:-python3}
# each run gets its own PlatformIO core folder (tests set one per session too)
export PLATFORMIO_CORE_DIR="${PLATFORMIO_CORE_DIR:-$PWD/.pio-core}"
# lint and format first: a finding fails the run before the (longer) tests
"$PY" -m ruff check .
"$PY" -m ruff format --check .
set +e
"$PY" -m pytest -q "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit $rc
