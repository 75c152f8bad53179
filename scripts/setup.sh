#!/usr/bin/env bash
# Installs the Debian packages dragon builds against, by name. Safe to rerun.
# The CUDA toolkit (nvcc, NVRTC) is expected in /usr/local/cuda where present;
# nothing here needs it to build or test the CPU tier.
set -euo pipefail
pkgs=(
  build-essential make pkg-config
  clang libclang-rt-14-dev   # libFuzzer and sanitizer runtimes for `make fuzz`
  libjansson-dev             # JSON: traces, databases, tokenizer.json
  libzstd-dev                # token shards
  libxgboost-dev             # cost model
  gnuplot-nox                # plots
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all packages present"
