#!/usr/bin/env bash
# OpenSSH's sshd and ssh-keygen from this machine (Debian 12: OpenSSH 9.2, glibc 2.36) with every
# library they load except glibc's own, for a GPU machine whose image has no openssh-server
# (benchmarks/gpu_compare_device.py --openssh). glibc stays the target's: a newer glibc runs
# binaries built against an older one, never the reverse.
#
#   benchmarks/gpu_openssh_bundle.sh OUT.tar.xz
set -euo pipefail
out=$(realpath -m "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/real" "$work/lib"
for tool in /usr/sbin/sshd /usr/bin/ssh-keygen; do
  cp "$tool" "$work/real/"
  ldd "$tool" | awk '/=> \//{print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;
      *) cp -L "$lib" "$work/lib/" ;;
    esac
  done
done
tar -C "$work" -cJf "$out" real lib
echo "$out: $(stat -c %s "$out") bytes; $(ls "$work/lib" | wc -l) libraries; $(/usr/sbin/sshd -V 2>&1 | head -1)"
