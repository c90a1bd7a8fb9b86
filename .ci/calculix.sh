#!/usr/bin/env bash
# CalculiX's ccx with external behaviours: an Abaqus UMAT loaded from a shared library through a
# material named @ABAQUS_<LIB>_<FUNC> (docs/native.md). Debian's binary is built without them (such
# a material then silently calls an empty stub), so this builds Debian's own source package of the
# same suite with -DCALCULIX_EXTERNAL_BEHAVIOURS_SUPPORT and -ldl, at the lowest CPU priority (about
# 6-9 minutes on 2 cores), and caches the binary outside the checkout. A second call reuses it.
#
# Usage: .ci/calculix.sh     prints the path of ccx on its last line (as root, with apt, on Debian)
# Cache: ${ADGRAD_CI_CACHE:-$HOME/.cache/adgrad-ci}/calculix (bin/ccx and recipe); delete it to rebuild.
set -euo pipefail

RECIPE="calculix-ccx 2.20 external-behaviours 1"     # change it when the build below changes
cache="${ADGRAD_CI_CACHE:-$HOME/.cache/adgrad-ci}/calculix"
ccx="$cache/bin/ccx"

reusable() {
    [ -x "$ccx" ] && [ "$(cat "$cache/recipe" 2>/dev/null)" = "$RECIPE" ] && ldd "$ccx" >/dev/null 2>&1 \
        && ! ldd "$ccx" | grep -q "not found"
}

if reusable; then
    echo "ci: CalculiX with external behaviours (cached): $ccx" >&2
    echo "$ccx"
    exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ci: building CalculiX needs root and apt-get (Debian or Ubuntu)" >&2
    exit 1
fi

# shellcheck disable=SC1091
. /etc/os-release
suite="${VERSION_CODENAME:?ci: /etc/os-release names no VERSION_CODENAME}"
deps=(gfortran make dpkg-dev libspooles-dev libarpack2-dev liblapack-dev libblas-dev)

# Debian's sources for the installed suite, once (deb822 format, as Debian 12's own sources)
srcs=/etc/apt/sources.list.d/adgrad-deb-src.sources
if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat >"$srcs" <<EOF
# added by adgrad's .ci/calculix.sh: Debian's sources, to build CalculiX with external behaviours
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${deps[@]}" >/dev/null

mkdir -p "$(dirname "$cache")"
work="$(mktemp -d "$cache.build.XXXXXX")"       # beside the cache: one file system for the final rename
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source --download-only calculix-ccx 2>&1 | grep -v "^W: Download is performed unsandboxed" >&2 || true
# applies Debian's patches (the .dsc's signature is checked by apt, through the suite's signed index)
dpkg-source -x calculix-ccx_*.dsc src >"$work/unpack.log" 2>&1 \
    || { cat "$work/unpack.log" >&2; echo "ci: unpacking calculix-ccx failed" >&2; exit 1; }
src="$(echo src/ccx_*/src)"
version="$(basename "$(dirname "$src")")"          # ccx_2.20

# Debian's flags (debian/rules) plus external behaviours; -ldl for dlopen; gfortran >= 10 needs
# -fallow-argument-mismatch for CalculiX's Fortran
cflags="-Wall -O2 -I/usr/include/spooles -DARCH=\"Linux\" -DSPOOLES -DARPACK -DMATRIXSTORAGE -DUSE_MT=1"
cflags+=" -DCALCULIX_EXTERNAL_BEHAVIOURS_SUPPORT"
start=$SECONDS
nice -n 19 make -C "$src" -j "$(nproc)" CFLAGS="$cflags" FFLAGS="-O2 -fallow-argument-mismatch" \
    LIBS="-lspooles -lpthread -larpack -llapack -lblas -lm -lc -ldl" "$version" >"$work/build.log" 2>&1 \
    || { tail -n 30 "$work/build.log" >&2; echo "ci: building CalculiX failed" >&2; exit 1; }
echo "ci: built CalculiX in $((SECONDS - start)) s" >&2

new="$work/calculix"
mkdir -p "$new/bin"
cp "$src/$version" "$new/bin/ccx"
echo "$RECIPE" >"$new/recipe"
rm -rf "$cache.old"
if [ -e "$cache" ]; then mv "$cache" "$cache.old"; fi
mv "$new" "$cache"
rm -rf "$cache.old"
reusable || { echo "ci: the CalculiX just built does not run: $(ldd "$ccx" | grep 'not found')" >&2; exit 1; }
echo "$ccx"
