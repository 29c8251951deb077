#!/bin/sh
# Structure checks of src/ (docs/architecture.md, "Rules the tree keeps"); prints each breach and
# exits 1 if there is one, 0 otherwise. Read-only. Needs universal-ctags (Debian: universal-ctags).
#   1. No function longer than 120 lines (ctags' end field), except the CUDA kernels named in
#      KERNELS below: a kernel's body is one unit of device code, and splitting it changes what
#      nvcc generates.
#   2. The device seam runs one way: no file under src/backend includes cuda/.
#   3. Settings in one place: every BERTCC_* variable read in src/ is listed in docs/flags.md, and
#      only src/core/settings.cpp reads the environment's BERTCC_* variables.
#   4. One format: every tracked C++/CUDA file is as clang-format (14, the project's .clang-format)
#      writes it. Fix with: git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
# Usage: scripts/check-structure.sh [REPO_ROOT]   (default: this script's repository)
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
MAX=120
# CUDA kernels allowed over the limit, as FILE:NAME
KERNELS="src/cuda/attention/tensor_core_kernels.cuh:fwd"
command -v ctags > /dev/null && ctags --version 2>/dev/null | grep -q 'Universal Ctags' || {
  echo "check-structure: needs universal-ctags (apt-get install universal-ctags)" >&2
  exit 2
}
command -v clang-format > /dev/null || {
  echo "check-structure: needs clang-format (apt-get install clang-format)" >&2
  exit 2
}
bad=0

# 1. Long functions. ctags names a kernel declared with __launch_bounds__(...) after the macro;
# the name is then read from the source line.
long=$(ctags --languages=C++ --langmap=C++:+.cu.cuh --kinds-C++=f --fields=+ne -x \
         --_xformat='%{end} %{line} %{input} %{name}' -R src |
       awk -v max=$MAX '$1 - $2 + 1 > max {print $1 - $2 + 1, $3, $2, $4}' | sort -rn)
if [ -n "$long" ]; then
  echo "$long" | while read -r n file line name; do
    if [ "$name" = "__launch_bounds__" ]; then
      name=$(sed -n "${line},$((line + 1))p" "$file" | tr '\n' ' ' | sed -E 's/.*__launch_bounds__\([^)]*\) *([A-Za-z_][A-Za-z_0-9]*) *\(.*/\1/')
    fi
    case " $KERNELS " in
      *" $file:$name "*) continue ;;
    esac
    echo "function over $MAX lines: $n $file:$line $name"
  done > /tmp/check-structure.$$
  if [ -s /tmp/check-structure.$$ ]; then
    cat /tmp/check-structure.$$
    bad=1
  fi
  rm -f /tmp/check-structure.$$
fi

# 2. The device seam
inc=$(grep -rn '#include *"cuda/' src/backend)
if [ -n "$inc" ]; then
  echo "$inc" | sed 's/^/src\/backend includes cuda\/: /'
  bad=1
fi

# 3. Settings: the names read, and who reads them
for v in $(grep -rhoE '"BERTCC_[A-Z0-9_]+"' src | tr -d '"' | sort -u); do
  if ! grep -q "\`$v\`" docs/flags.md; then
    echo "$v is read in src/ but not listed in docs/flags.md"
    bad=1
  fi
done
env_reads=$(grep -rn 'getenv *( *"BERTCC_' src | grep -v '^src/core/settings\.cpp:')
if [ -n "$env_reads" ]; then
  echo "$env_reads" | sed 's/^/BERTCC_* read outside src\/core\/settings.cpp: /'
  bad=1
fi

# 4. Format (clang-format's own report names file:line:column for each place)
fmt=$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run 2>&1 | grep -E 'warning:' | sed 's/ warning:.*//')
if [ -n "$fmt" ]; then
  echo "$fmt" | head -50 | sed 's/^/not clang-formatted: /'
  echo "($(echo "$fmt" | wc -l) places; fix with: git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i)"
  bad=1
fi

[ $bad = 0 ] && echo "check-structure: OK (functions <= $MAX lines but the listed kernels; src/backend names no cuda/; every BERTCC_* in docs/flags.md; clang-format clean)"
exit $bad
