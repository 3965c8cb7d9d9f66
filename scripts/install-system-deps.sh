#!/usr/bin/env bash
# Install the system packages ddpnet's tests and lab need (Debian/Ubuntu), only those missing.
# As root: apt-get directly; otherwise through sudo -n when allowed; else say what is missing
# and go on (tests that need them skip with a reason).
set -euo pipefail
PACKAGES=(
  iproute2 iptables nftables iputils-ping iperf3 procps kmod util-linux
  openssh-client openssh-server
  openmpi-bin slurm-wlm slurm-client munge
  chromium tmux
  prometheus
  netplan.io firewalld network-manager ufw
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "system packages: all present"; exit 0; }
if ! command -v apt-get >/dev/null; then
  echo "system packages missing (${missing[*]}) and no apt-get: install them by hand" >&2; exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "not root: cannot install ${missing[*]}; tests that need them will skip" >&2; exit 0
  fi
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
# policy-rc.d keeps package scripts from starting daemons; tests start their own.
$SUDO sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "system packages installed"
