#!/usr/bin/env bash
# Downloads into .debs/ the Debian packages the GPU machine lacks (it has no
# network and no apt): the libraries dragon links. scripts/gpu.sh unpacks
# them there under /tmp. .debs/ is not committed; run this before a GPU run.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs
cd .debs
apt-get download libjansson4 libjansson-dev libxgboost0 libxgboost-dev libdmlc0 libzstd1 libzstd-dev 2>&1 | grep -v "unsandboxed" || true
ls -1
