#!/bin/bash
# Build current Open vSwitch and OVN offline from Debian's source packages, once per
# machine, for the sandbox, the tests and the benchmarks (Debian 12 ships OVS 3.1.0
# and OVN 23.03, whose userspace conntrack aborts after gateway failovers; see
# docs/decisions/0029-current-ovs-ovn.md).
#
# The result is installed under $PACIFIC_OVS_CACHE (default
# /var/cache/pacific/ovs/ovs<OVS>-ovn<OVN>), with `current` beside it pointing at it:
# bin/ sbin/ share/ lib/ (libopenvswitch and libovn, shared) and python/ovs/_json.*.so,
# the C JSON parser of the same OVS for this Python (pacific/ovn/cjson.py loads it).
# The sandbox uses this prefix unless PACIFIC_OVS_PREFIX says otherwise (/usr: the
# Debian packages).  Returns at once when the stamp names the pinned versions.
#
# Sources: Debian's archive serves only current source packages; Debian 13's OVS 3.5.0
# and OVN 25.03.0 are gone from it (404), unstable's OVS 4.0.0 and OVN 26.03.1 are there.
# Debian 13's binaries need Debian 13's libc, hence the build.
set -euo pipefail
OVS_DEB=4.0.0-2;  OVS_VER=${OVS_DEB%-*}      # Debian source versions (pinned)
OVN_DEB=26.03.1-1; OVN_VER=${OVN_DEB%-*}
ROOT=${PACIFIC_OVS_CACHE_ROOT:-/var/cache/pacific/ovs}
CACHE=$ROOT/ovs$OVS_VER-ovn$OVN_VER
STAMP=$CACHE/.built
WANT="openvswitch=$OVS_DEB ovn=$OVN_DEB"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  [ "$(readlink "$ROOT/current" 2>/dev/null)" = "$(basename $CACHE)" ] || ln -sfn "$(basename $CACHE)" "$ROOT/current"
  exit 0
fi
say() { printf 'ovs/ovn build: %s\n' "$*"; }
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 ))s"; }
. "$(dirname "$0")/lib.sh"
install_missing "build dependencies" autoconf automake libtool make gcc pkgconf libssl-dev \
  libcap-ng-dev libunbound-dev python3-dev xz-utils
W=$ROOT/work
A=$W/apt
if [ ! -f $A/src/.fetched ] || [ "$(cat $A/src/.fetched)" != "$WANT" ]; then
  private_apt $A sid
  say "fetching Debian sources $WANT ($(elapsed))"
  apt-get "${APTO[@]}" -q update >/dev/null
  rm -f $A/src/*
  (cd $A/src && apt-get "${APTO[@]}" source --download-only $WANT >/dev/null 2>&1) || {
    echo "ovs/ovn build: cannot fetch $WANT (deb-src sid, $A/sources.list)" >&2; exit 1; }
  echo "$WANT" > $A/src/.fetched
fi
S=$W/src
rm -rf $S; mkdir -p $S
say "unpacking ($(elapsed))"
tar -xJf $A/src/openvswitch_$OVS_VER.orig.tar.xz -C $S
tar -xJf $A/src/ovn_$OVN_VER.orig.tar.xz -C $S
OVS=$S/openvswitch-$OVS_VER
OVN=$S/ovn-$OVN_VER
# Debian's repacked tarballs include debian/automake.mk from Makefile.am, which lives
# in the packaging, not the tarball; without it the build is regenerated from scratch.
sed -i '/^include debian\/automake.mk/d' $OVS/Makefile.am $OVN/Makefile.am
# OVN 26.03 is released against OVS 3.7; three things of OVS's library that it uses
# changed in OVS 4.0, each adapted here to what OVS 3.7 did (and checked, so that a
# new pin that no longer needs it, or needs more, stops the build rather than
# building something else):
#  - compose_nd_ns() takes the multicast choice and the destination MAC: OVS 3.7
#    always sent a solicited-node multicast NS, as both of OVN's calls want;
#  - route_table_dump_one_table() takes an address family: OVS 3.7 dumped all;
#  - the Windows-service hooks (service_start...) are gone: no-ops on Linux in 3.7.
COMPAT_CFLAGS=
if grep -q "compose_nd_ns(struct dp_packet \*, bool multicast" $OVS/lib/packets.h; then
  sed -i -e 's/compose_nd_ns(&packet, eth, local, target)/compose_nd_ns(\&packet, true, eth, eth_addr_zero, local, target)/' \
         -e 's/compose_nd_ns(&packet, ip_flow->dl_src, &ipv6_src,/compose_nd_ns(\&packet, true, ip_flow->dl_src, eth_addr_zero, \&ipv6_src,/' \
         $OVN/controller/pinctrl.c
  sed -i 's/route_table_dump_one_table(table_id, handle_route_msg, &data)/route_table_dump_one_table(table_id, AF_UNSPEC, handle_route_msg, \&data)/' \
         $OVN/controller/route-exchange-netlink.c
  [ "$(grep -c 'compose_nd_ns(&packet, true,' $OVN/controller/pinctrl.c)" = 2 ] &&
  [ "$(grep -c 'AF_UNSPEC, handle_route_msg' $OVN/controller/route-exchange-netlink.c)" = 2 ] || {
    echo "ovs/ovn build: OVN's calls into OVS changed; adapt the patches above" >&2; exit 1; }
fi
if ! grep -q "service_start" $OVS/lib/daemon.h; then
  cat > $W/ovs4-compat.h <<'EOF_COMPAT'
/* OVN calls OVS 3.x's Windows-service hooks, which OVS 4.0 dropped; on Linux they
 * were no-ops (lib/daemon-unix.c). */
#ifndef PACIFIC_OVS4_COMPAT_H
#define PACIFIC_OVS4_COMPAT_H 1
#include <stdbool.h>
static inline void service_start(int *argcp, char **argvp[]) { (void) argcp; (void) argvp; }
static inline void service_stop(void) { }
static inline bool should_service_stop(void) { return false; }
#endif
EOF_COMPAT
  COMPAT_CFLAGS="-include $W/ovs4-compat.h"
fi
CONF=(--prefix=$CACHE --localstatedir=/var --sysconfdir=/etc --enable-shared --disable-static
      --enable-ssl CFLAGS=-O2)
background() {   # run "$@" with its output in $1.log, a line of progress every 30 s
  local what=$1; shift
  ("$@") >$W/$what.log 2>&1 &
  local pid=$!
  local n=0
  while kill -0 $pid 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    [ $((n % 30)) = 0 ] && kill -0 $pid 2>/dev/null && say "still building $what ($(elapsed))"
  done
  wait $pid || { echo "ovs/ovn build: $what failed; last lines of $W/$what.log:" >&2
                 tail -n 30 $W/$what.log >&2; exit 1; }
}
say "building Open vSwitch $OVS_VER (about 3 minutes on 2 cores; $(elapsed))"
background ovs bash -c "cd $OVS && ./boot.sh && ./configure ${CONF[*]} && make -j$(nproc) && make install"
say "building OVN $OVN_VER (about 2 minutes on 2 cores; $(elapsed))"
background ovn bash -c "cd $OVN && ./boot.sh && ./configure ${CONF[*]} --with-ovs-source=$OVS \
  --with-ovs-build=$OVS && make -j$(nproc) CFLAGS='-O2 $COMPAT_CFLAGS' && make install"
say "building the C JSON parser for Python ($(elapsed))"
PYSUFFIX=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
PYINC=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
mkdir -p $CACHE/python/ovs
gcc -shared -fPIC -O2 -I$PYINC -I$OVS/include -I$OVS/lib -I$OVS $OVS/python/ovs/_json.c \
    -L$CACHE/lib -lopenvswitch -Wl,-rpath,$CACHE/lib -o $CACHE/python/ovs/_json$PYSUFFIX
rm -rf $CACHE/share/doc $CACHE/share/man
rm -rf $W            # sources, objects, apt lists: ~1 GB, not needed once built
echo "$WANT" > $STAMP
ln -sfn "$(basename $CACHE)" "$ROOT/current"
say "done in $(elapsed): $($CACHE/sbin/ovs-vswitchd --version | head -1), \
$($CACHE/bin/ovn-northd --version | head -1) in $CACHE"
