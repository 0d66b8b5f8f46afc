#!/usr/bin/env bash
# Installs what the build needs on Debian/Ubuntu when it is missing:
# a compiler, CMake, Open MPI and Google Test. The CUDA toolkit's headers are
# expected in /usr/local/cuda (the driver itself is loaded at run time).
set -euo pipefail
pkgs=(build-essential cmake openmpi-bin libopenmpi-dev libgtest-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "deps.sh: missing ${missing[*]} and no apt-get; install them by hand" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "deps.sh: installing ${missing[*]}" >&2
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi
