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
. "$(dirname "$0")/lib.sh"              # KVER, KTAG, kube_source, kube_ldflags
CACHE=${PACIFIC_KUBE_CACHE:-/var/cache/pacific/kubernetes/$KTAG}
CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
STAMP=$CACHE/bin/.built
kube_build_begin "kubernetes build" $STAMP
install_missing "build tools" golang-go rsync make
W=$CACHE/work
mkdir -p $CACHE/bin
kube_source $W
if [ ! -s $SRC/pkg/generated/openapi/zz_generated.openapi.go ]; then
  say "generating OpenAPI definitions ($(elapsed))"
  (cd $SRC && make gen_openapi >/dev/null)
fi
say "compiling $CMDS (about 4 minutes on 2 cores; $(elapsed))"
(cd $SRC && in_background compiling go build -trimpath -ldflags "$(kube_ldflags)" -o $CACHE/bin/ \
   $(for c in $CMDS; do echo ./cmd/$c; done))
cp $W/x/usr/bin/etcd $W/x/usr/bin/etcdctl $CACHE/bin/
rm -rf $W            # sources and Go cache: ~2 GB, not needed once built
echo "$KVER" > $STAMP
say "done in $(elapsed): $CACHE/bin"
