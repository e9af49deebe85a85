#!/usr/bin/env bash
# Install what dflashops and its tests need on a fresh Debian machine (idempotent, quick when
# already done). Prints a line before each long step and its duration after it.
#
#   bash scripts/setup.sh              system packages (as root), .venv, and the lab's vLLM CPU
#                                      runtime and tiny models (cached under ~/.cache/dflashops)
#   bash scripts/setup.sh --venv-only  .venv only: no root, no system packages, no lab runtime
#                                      or models (enough for the unit tests, ruff and mypy)
set -euo pipefail
cd "$(dirname "$0")/.."

venv_only=false
case "${1-}" in
  "") ;;
  --venv-only) venv_only=true ;;
  *)
    echo "usage: bash scripts/setup.sh [--venv-only]" >&2
    exit 2
    ;;
esac

started=0
begin() { # begin MESSAGE: say what starts, and start its clock
  echo "setup: $1"
  started=$SECONDS
}
finish() { # finish MESSAGE: say it is done, with the seconds it took
  echo "setup: $1 ($((SECONDS - started)) s)"
}

APT_PACKAGES=(openssh-server openssh-client iproute2 util-linux tzdata lxc busybox-static)

if [ "$venv_only" = true ]; then
  :
elif [ "$(id -u)" = 0 ]; then
  missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    begin "installing ${missing[*]} (apt)…"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    finish "system packages installed"
  fi
  mkdir -p /run/sshd && chmod 0755 /run/sshd
else
  echo "setup: not root: skipping system packages (${APT_PACKAGES[*]}); root-only tests will skip"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.dflashops-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  begin "installing dflashops and its Python dependencies into .venv…"
  # this machine kind's pip config names local indexes that may be absent: drop that noise only
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev,lab]' 2>&1 |
    { grep -v "is ignored: it is neither a file nor a directory" || true; }
  touch "$stamp"
  finish ".venv ready"
fi

if [ "$venv_only" = true ]; then
  exit 0
fi

# The lab's vLLM CPU runtime (~3 min and 3.5 GB the first time) and its tiny models (3-5 min:
# the target and the DFlash drafter are trained here, once); both are cached under
# ~/.cache/dflashops/lab and this returns at once when they are there. Its progress goes to
# stderr, which stays on the terminal (or the CI log); only the JSON summary is dropped.
begin "the lab's vLLM CPU runtime and tiny models (first time ~8 min, cached afterwards)…"
.venv/bin/dflashops lab models --json >/dev/null
finish "lab runtime and models ready"
