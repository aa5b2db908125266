#!/bin/bash
# Build the Kubernetes control plane (and kubelet, kubectl) that the sandbox runs,
# offline, from Debian 12's `kubernetes` source package, plus etcd from Debian's
# etcd-server binary package.  Once per machine: the result is cached under
# $PACIFIC_KUBE_CACHE (default /var/cache/pacific/kubernetes/<version>) and this
# script returns at once when the stamp there names the pinned version.
#
# Three fixes the tarball needs on Go >= 1.18 (see docs/sandbox.md):
#   1. k8s <= 1.22 builds in GOPATH mode (GO111MODULE=off), not with -mod=vendor;
#   2. pkg/generated/openapi is not shipped: `make gen_openapi` (needs rsync);
#   3. vendored modern-go/reflect2 1.0.1 crashes the apiserver under Go >= 1.18:
#      replaced by Debian's golang-github-modern-go-reflect2-dev 1.0.2.
set -euo pipefail
KVER=1.20.5+really1.20.2-1.1+deb12u1     # Debian source version (pinned)
KTAG=v1.20.2                              # what the binaries report
CACHE=${PACIFIC_KUBE_CACHE:-/var/cache/pacific/kubernetes/$KTAG}
CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
STAMP=$CACHE/bin/.built
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KVER" ]; then
  exit 0
fi
say() { printf 'kubernetes build: %s\n' "$*"; }
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 ))s"; }
export DEBIAN_FRONTEND=noninteractive
. "$(dirname "$0")/lib.sh"
install_missing "build tools" golang-go rsync make
W=$CACHE/work
A=$W/apt
mkdir -p $A/src $W/debs $CACHE/bin
SRC=$W/gopath/src/k8s.io/kubernetes
if [ ! -f $SRC/.unpacked ]; then
  private_apt $A bookworm
  say "fetching Debian source kubernetes=$KVER ($(elapsed))"
  apt-get "${APTO[@]}" -q update >/dev/null
  (cd $A/src && apt-get "${APTO[@]}" source --download-only "kubernetes=$KVER" >/dev/null)
  rm -rf $SRC; mkdir -p "$(dirname $SRC)"
  say "unpacking ($(elapsed))"
  tar -xzf $A/src/kubernetes_1.20.5+really1.20.2.orig.tar.gz -C "$(dirname $SRC)"
  mv "$(dirname $SRC)/kubernetes-1.20.2" $SRC
  touch $SRC/.unpacked
fi
if ! ls $W/debs/etcd-server_*.deb >/dev/null 2>&1; then
  say "fetching etcd-server and reflect2 packages ($(elapsed))"
  (cd $W/debs && apt-get download etcd-server etcd-client golang-github-modern-go-reflect2-dev >/dev/null)
fi
rm -rf $W/x; mkdir -p $W/x
for d in $W/debs/*.deb; do dpkg-deb -x $d $W/x; done
V=$SRC/vendor/github.com/modern-go/reflect2
if [ ! -e $V/go_above_118.go ]; then
  say "replacing vendored reflect2 with Debian's 1.0.2"
  rm -rf $V; mkdir -p $V
  cp $W/x/usr/share/gocode/src/github.com/modern-go/reflect2/*.go \
     $W/x/usr/share/gocode/src/github.com/modern-go/reflect2/*.s $V/
  rm -f $V/*_test.go
fi
export GO111MODULE=off GOFLAGS= GOPROXY=off GOMAXPROCS=${GOMAXPROCS:-2} GOPATH=$W/gopath \
       GOCACHE=$W/gocache CGO_ENABLED=0
if [ ! -s $SRC/pkg/generated/openapi/zz_generated.openapi.go ]; then
  say "generating OpenAPI definitions ($(elapsed))"
  (cd $SRC && make gen_openapi >/dev/null)
fi
LD="-s -w"; pkg=k8s.io/kubernetes/vendor
for kv in gitVersion=$KTAG gitMajor=1 gitMinor=20 gitTreeState=clean \
          gitCommit=faecb196815e248d3ecfb03c680a4507229c2a56 buildDate=2021-01-13T13:20:00Z; do
  LD="$LD -X $pkg/k8s.io/component-base/version.$kv -X $pkg/k8s.io/client-go/pkg/version.$kv"
done
say "compiling $CMDS (about 4 minutes on 2 cores; $(elapsed))"
(cd $SRC && go build -trimpath -ldflags "$LD" -o $CACHE/bin/ $(for c in $CMDS; do echo ./cmd/$c; done)) &
gopid=$!
while kill -0 $gopid 2>/dev/null; do
  sleep 20
  kill -0 $gopid 2>/dev/null && say "still compiling ($(elapsed))"
done
wait $gopid
cp $W/x/usr/bin/etcd $W/x/usr/bin/etcdctl $CACHE/bin/
rm -rf $W            # sources and Go cache: ~2 GB, not needed once built
echo "$KVER" > $STAMP
say "done in $(elapsed): $CACHE/bin"
