#!/usr/bin/env bash
# ip, tc, nft and iperf3 for a machine that lacks them and cannot install them (a GPU node
# with no network, not root for apt): Debian packages unpacked with `dpkg -x` into a prefix,
# nothing installed system-wide. How the H100 evidence was made (../shared/evidence/gpu-h100).
#
#   scripts/prefix-debs.sh download DEBDIR     # on a machine with apt and network (Debian 12
#                                              # or the GPU node's release): the .debs
#   eval "$(scripts/prefix-debs.sh unpack DEBDIR [PREFIX])"   # on the GPU node: PATH and
#                                              # LD_LIBRARY_PATH exports for the prefix
#
# Only what is missing gets a prefix: `unpack` prints nothing when ip, tc, nft and iperf3 are
# all on PATH. The C library and the compiler runtime are never downloaded (the node's own
# are used: a foreign libc on LD_LIBRARY_PATH would break every program).
set -euo pipefail
PACKAGES=(iproute2 iperf3 libiperf0 nftables libnftables1)
NEVER='^(libc6|libgcc-s1|libstdc\+\+6|libcrypt1|libzstd1|liblzma5|zlib1g|libssl3|debconf.*|dpkg|perl-base)$'

missing_tools() {
  local t; for t in ip tc nft iperf3; do command -v "$t" >/dev/null || echo "$t"; done
}

case "${1:-}" in
  download)
    dir=${2:?usage: prefix-debs.sh download DEBDIR}; mkdir -p "$dir"; cd "$dir"
    deps=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
             --no-breaks --no-replaces --no-enhances "${PACKAGES[@]}" \
           | grep -E '^[a-z0-9]' | grep -vE "$NEVER" | sort -u)
    # shellcheck disable=SC2086
    apt-get download $deps >/dev/null
    echo "prefix-debs: $(ls ./*.deb | wc -l) packages in $dir" >&2 ;;
  unpack)
    dir=${2:?usage: prefix-debs.sh unpack DEBDIR [PREFIX]}; prefix=${3:-/tmp/ddpnet-prefix}
    [ -z "$(missing_tools)" ] && exit 0
    command -v dpkg >/dev/null || { echo "prefix-debs: no dpkg to unpack with" >&2; exit 1; }
    mkdir -p "$prefix"
    for deb in "$dir"/*.deb; do dpkg -x "$deb" "$prefix"; done
    echo "prefix-debs: unpacked $(ls "$dir"/*.deb | wc -l) packages into $prefix for:" \
         "$(missing_tools | tr '\n' ' ')" >&2
    echo "export PATH=$prefix/usr/sbin:$prefix/usr/bin:$prefix/sbin:$prefix/bin:\$PATH"
    echo "export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" ;;
  *)
    echo "usage: prefix-debs.sh download DEBDIR | unpack DEBDIR [PREFIX]" >&2; exit 2 ;;
esac
