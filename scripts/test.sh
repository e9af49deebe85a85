#!/usr/bin/env bash
# Run the tests. Arguments after the mode go to pytest.
#
#   bash scripts/test.sh [ARGS…]         the whole suite, after the full setup (quick when nothing
#                                        changed); what CI runs
#   bash scripts/test.sh --unit [ARGS…]  tests/unit without the tests marked root or vllm, after
#                                        `setup.sh --venv-only`: no root, no lab runtime or models
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1-}" = --unit ]; then
  shift
  bash scripts/setup.sh --venv-only
  # a later -m in ARGS replaces this filter (pytest keeps the last -m); four workers: the unit
  # tests mostly wait (timeouts, subprocesses), so four share two cores well (-n 0: one process)
  exec .venv/bin/python -m pytest tests/unit -m "not root and not vllm" -n 4 "$@"
fi
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
