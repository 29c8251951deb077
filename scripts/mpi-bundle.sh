#!/bin/sh
# mpi-bundle.sh BUNDLE: adds this machine's Open MPI launcher (Debian's openmpi-bin: orterun/mpirun,
# its MCA components, help files and default parameters, PMIx's components) to a bundle made by
# ../shared/tools/device-bundle, relocated: BUNDLE/mpi is the prefix, the libraries the components
# need go to BUNDLE/lib, and BUNDLE/mpi/env.sh points Open MPI (OPAL_* directories) and PMIx there.
# The GPU machine has no MPI; with this, `. BUNDLE/env.sh; . BUNDLE/mpi/env.sh; mpirun -np 2 ...`
# runs bertcc's MPI ranks there (one node: shared memory and loopback TCP).
# Checked by scripts/mpi-bundle.sh --check BUNDLE: mpirun -np 2 from the bundle with the system's
# Open MPI hidden (a private mount namespace: needs unshare, run as root).
set -eu
if [ "${1:-}" = --check ]; then
  R="$(cd "$2" && pwd)"
  exec unshare -m bash -c "
    for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/share/openmpi /etc/openmpi /usr/lib/x86_64-linux-gnu/pmix2; do
      [ -d \$d ] && mount -t tmpfs none \$d
    done
    mount --bind /dev/null /usr/bin/orterun 2>/dev/null || true
    . '$R/env.sh' && . '$R/mpi/env.sh'
    mpirun -np 2 '$R/bertcc' --version 2>&1 | sort | uniq -c
    mpirun -np 2 sh -c 'echo rank \$OMPI_COMM_WORLD_RANK of \$OMPI_COMM_WORLD_SIZE'
  "
fi
B="${1:?usage: scripts/mpi-bundle.sh BUNDLE | --check BUNDLE}"
[ -x "$(command -v orterun)" ] || { echo "mpi-bundle: no orterun here (apt-get install openmpi-bin)" >&2; exit 1; }
[ -d "$B/lib" ] || { echo "mpi-bundle: $B is not a device-bundle (no lib/)" >&2; exit 1; }
M="$B/mpi"
SYS=/usr/lib/x86_64-linux-gnu
rm -rf "$M"
mkdir -p "$M/bin" "$M/lib" "$M/share" "$M/etc" "$M/pmix"
cp -L "$(command -v orterun)" "$M/bin/orterun"
ln -s orterun "$M/bin/mpirun"
[ -x /usr/bin/orted ] && cp -L /usr/bin/orted "$M/bin/"
cp -rL "$SYS/openmpi/lib/openmpi3" "$M/lib/"
cp -rL /usr/share/openmpi "$M/share/"
cp -L /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$M/etc/" 2>/dev/null || true
[ -d "$SYS/pmix2/lib/pmix" ] && cp -rL "$SYS/pmix2/lib/pmix/." "$M/pmix/"
[ -d "$SYS/pmix2/share/pmix" ] && cp -rL "$SYS/pmix2/share/pmix" "$M/share/"
# every library the launcher and the components load, except glibc's (the GPU machine has those)
for f in "$M/bin/orterun" "$M/bin/orted" "$M"/lib/openmpi3/*.so "$M"/pmix/*.so; do
  [ -f "$f" ] || continue
  ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  n=$(basename "$lib")
  case $n in libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda*|libcudart*|libnvidia*) ;;
    *) [ -e "$B/lib/$n" ] || cp -L "$lib" "$B/lib/" ;;
  esac
done
cat > "$M/env.sh" <<'EOF'
# sourced after the bundle's env.sh: this bundle's Open MPI, relocated
_m="$(cd "$(dirname "${BASH_SOURCE:-$0}")" 2>/dev/null && pwd)"
[ -f "$_m/bin/orterun" ] || _m="${BERTCC_MPI_PREFIX:?set BERTCC_MPI_PREFIX to the mpi folder of the bundle}"
export OPAL_PREFIX="$_m" OPAL_EXEC_PREFIX="$_m" OPAL_BINDIR="$_m/bin" OPAL_LIBDIR="$_m/lib" \
  OPAL_PKGLIBDIR="$_m/lib/openmpi3" OPAL_DATAROOTDIR="$_m/share" OPAL_DATADIR="$_m/share" \
  OPAL_PKGDATADIR="$_m/share/openmpi" OPAL_SYSCONFDIR="$_m/etc"
export OMPI_MCA_mca_base_component_path="$_m/lib/openmpi3" PMIX_MCA_mca_base_component_path="$_m/pmix"
export PMIX_INSTALL_PREFIX="$_m" OMPI_MCA_mca_base_param_files="$_m/etc/openmpi-mca-params.conf"
# one node: shared memory and loopback; no InfiniBand or UCX probing; root allowed (the GPU machine)
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH="$_m/bin:$PATH"
unset _m
EOF
echo "mpi-bundle: Open MPI $(orterun --version 2>&1 | head -1 | awk '{print $NF}') in $M ($(du -sh "$M" | cut -f1))"
