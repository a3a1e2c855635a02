#!/usr/bin/env bash
# Unpacks the Debian 12 packages of a single-node Slurm (controller, node daemon, client commands,
# munge and the libraries a machine without them lacks) into PREFIX, for a machine that has no
# package registry (the GPU machines): run it here, where apt works, and carry PREFIX along.
# tests/helpers/slurm/install.py runs the programs from there (SlurmInstall(prefix=PREFIX)).
#
#   bash tests/helpers/slurm/unpack_debs.sh .carry/slurm      # ~4 MB of .debs, ~15 MB unpacked
set -euo pipefail

prefix=${1:?usage: unpack_debs.sh PREFIX}
PACKAGES=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libmunge2
          libhwloc15 libjson-c5 liblua5.1-0 liblz4-1 libnuma1 libyaml-0-2)

debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
# apt-get download needs package lists; a machine that installed its packages long ago may have none.
if ! (cd "$debs" && apt-get download -qq "${PACKAGES[@]}" 2>/dev/null); then
    apt-get update -qq
    (cd "$debs" && apt-get download -qq "${PACKAGES[@]}")
fi
mkdir -p "$prefix"
for deb in "$debs"/*.deb; do
    dpkg -x "$deb" "$prefix"
done
echo "unpacked ${#PACKAGES[@]} packages into $prefix" >&2
