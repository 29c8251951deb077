#!/bin/sh
# Installs the Debian packages bertcc needs, only those that are missing.
# openmpi-bin, libopenmpi-dev: the MPI communicator (mpirun; the data-parallel tests).
# clang, libclang-rt-14-dev: libFuzzer for make fuzz. universal-ctags, clang-format: scripts/check-structure.sh.
# libboost-dev: bertcc serve (Boost.Beast, headers only); wrk: its load benchmark; chromium: the page test (with npm
# playwright-core in tests/serve/page).
# libopenblas0-pthread: Debian's torch (the test reference and benchmark peer) links the generic
# libblas.so.3, which is the slow netlib reference BLAS unless OpenBLAS provides it.
set -eu
PKGS="cmake g++ make pkg-config libdnnl-dev libhdf5-dev libutf8proc-dev nlohmann-json3-dev \
libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libomp-dev libbz2-dev \
python3-torch python3-numpy python3-h5py libopenblas0-pthread openmpi-bin libopenmpi-dev \
clang libclang-rt-14-dev libboost-dev wrk chromium universal-ctags clang-format"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js and npm (for the tokenizer peer): only when absent; some images ship a nodejs build
# that bundles npm, which Debian's separate npm package would conflict with.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -z "$missing" ]; then
  echo "install-deps: all Debian packages present"
else
  echo "install-deps: installing:$missing"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || true
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# npm test peer: Hugging Face tokenizers (prebuilt), pinned in tests/tokenizer/package-lock.json.
HERE="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -d "$HERE/tests/tokenizer/node_modules/tokenizers" ]; then
  command -v npm >/dev/null 2>&1 || { echo "install-deps: npm is required for the tokenizer tests" >&2; exit 1; }
  echo "install-deps: npm ci (tests/tokenizer)"
  (cd "$HERE/tests/tokenizer" && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -d "$HERE/tests/serve/page/node_modules/playwright-core" ]; then
  echo "install-deps: npm ci (tests/serve/page)"
  (cd "$HERE/tests/serve/page" && npm ci --no-audit --no-fund --loglevel=error)
fi
# ONNX Runtime for the export test (CPU only: ONNXRUNTIME_NODE_INSTALL=skip downloads no GPU binaries).
if [ ! -d "$HERE/tests/onnx/node_modules/onnxruntime-node" ]; then
  echo "install-deps: npm ci (tests/onnx)"
  (cd "$HERE/tests/onnx" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error)
fi
