#!/bin/sh
# Installs the Debian packages bertcc needs, only those that are missing.
# libopenblas0-pthread: Debian's torch (the test reference and benchmark peer) links the generic
# libblas.so.3, which is the slow netlib reference BLAS unless OpenBLAS provides it.
set -eu
PKGS="cmake g++ make pkg-config libdnnl-dev libhdf5-dev libutf8proc-dev nlohmann-json3-dev \
libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libomp-dev libbz2-dev \
python3-torch python3-numpy python3-h5py libopenblas0-pthread"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then echo "install-deps: all Debian packages present"; exit 0; fi
echo "install-deps: installing:$missing"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends $missing
