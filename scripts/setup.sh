#!/usr/bin/env bash
# Install everything dflashops and its tests need on a fresh Debian machine (idempotent, quick
# when already done): system packages (as root), the project venv in .venv, and the lab's
# vLLM CPU runtime and models (cached under ~/.cache/dflashops).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(openssh-server openssh-client iproute2 util-linux tzdata lxc busybox-static)

if [ "$(id -u)" = 0 ]; then
  missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
  # this machine kind's pip config names local indexes that may be absent: drop that noise only
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev,lab]' 2>&1 |
    { grep -v "is ignored: it is neither a file nor a directory" || true; }
  touch "$stamp"
fi

# The lab's vLLM CPU runtime (~3 min and 3.5 GB the first time) and its tiny models (3-5 min:
# the target and the DFlash drafter are trained here, once);
# both are cached under ~/.cache/dflashops/lab and this returns at once when they are there.
.venv/bin/dflashops lab models --json >/dev/null
