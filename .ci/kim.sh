#!/usr/bin/env bash
# LAMMPS with the KIM API, the KIM API's development files, Debian's LAMMPS potential files and
# OpenMPI, for tests/test_kim.py (adgrad export --kim: docs/lammps.md). Quick when they are there.
#
# Usage: .ci/kim.sh     (as root, with apt, on Debian or Ubuntu); exit 1 if they cannot be installed
set -euo pipefail

have() {
    # lmp -h's whole output first: grep -q would end the pipe early (SIGPIPE under pipefail)
    [ -x /usr/bin/lmp ] && [[ "$(/usr/bin/lmp -h 2>/dev/null)" =~ [[:space:]]KIM[[:space:]] ]] \
        && [ -f /usr/include/kim-api/KIM_ModelHeaders.h ] \
        && [ -d /usr/share/lammps/potentials ] && command -v mpirun >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1
}

if have; then
    echo "ci: LAMMPS with KIM, libkim-api-dev and OpenMPI are installed" >&2
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ci: installing LAMMPS and the KIM API needs root and apt-get (Debian or Ubuntu)" >&2
    exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lammps lammps-data libkim-api-dev \
    openmpi-bin g++ pkg-config >&2
have || { echo "ci: LAMMPS with KIM is still missing after apt-get install" >&2; exit 1; }
echo "ci: installed LAMMPS with KIM, libkim-api-dev and OpenMPI" >&2
