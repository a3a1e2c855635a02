#!/usr/bin/env bash
# Installs the Debian packages of the single-node Slurm that the tests start (tests/helpers/slurm/cluster.py):
# the controller, the node daemon, the client commands, munge, and for the accounting variant
# slurmdbd with MariaDB. Idempotent: returns at once when everything is installed already.
#
# Runs as root on Debian/Ubuntu, non-interactively, and starts no service: the tests start the
# daemons themselves (no systemd in containers and CI machines), so the packages' maintainer
# scripts are told by a policy-rc.d (exit 101 = "action forbidden") not to start any.
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

missing=()
for pkg in "${PACKAGES[@]}"; do
    # "install ok installed" only when the package is fully configured.
    if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "tests/helpers/slurm/install.sh: must run as root to install: ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# written by compilebench tests/helpers/slurm/install.sh for the duration of the install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
    trap 'rm -f "$policy"' EXIT
fi

echo "tests/helpers/slurm/install.sh: installing ${missing[*]}" >&2
apt-get update -qq
apt-get install -y -qq -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    --no-install-recommends "${PACKAGES[@]}" >/dev/null
if [[ $own_policy -eq 1 ]]; then
    rm -f "$policy"
fi
