#!/usr/bin/env bash
# Run the whole test suite (setup first; it is quick when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
