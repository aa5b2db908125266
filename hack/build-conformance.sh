#!/bin/bash
# Build Kubernetes' own e2e test binary (e2e.test) and its test image's binary
# (agnhost) offline, from the same Debian source package as the sandbox's
# Kubernetes (hack/build-kubernetes.sh), for `make conformance`.  Once per machine:
# cached under $PACIFIC_KUBE_CACHE/conformance (default
# /var/cache/pacific/kubernetes/v1.20.2/conformance); returns at once when the
# stamp there names the pinned version.
#
# Beyond build-kubernetes.sh's fixes, e2e.test needs test/e2e/generated/bindata.go
# (not shipped: hack/generate-bindata.sh) and `go test -c -vet=off` (Go 1.19's vet
# rejects some of the 2020 test code).  The image's other tools (curl,
# netcat-openbsd, ss) are Debian's, copied with their libraries by
# pacific/sandbox/conformance.py.
set -euo pipefail
. "$(dirname "$0")/lib.sh"              # KVER, KTAG, kube_source, kube_ldflags
CACHE=${PACIFIC_KUBE_CACHE:-/var/cache/pacific/kubernetes/$KTAG}/conformance
STAMP=$CACHE/.built
kube_build_begin "conformance build" $STAMP
install_missing "build tools and the test image's tools" golang-go rsync make curl \
  netcat-openbsd iproute2 wget dash
W=$CACHE/work
mkdir -p $CACHE
kube_source $W
if [ ! -s $SRC/test/e2e/generated/bindata.go ]; then
  say "generating test/e2e/generated/bindata.go ($(elapsed))"
  (cd $SRC && hack/generate-bindata.sh >/dev/null)
fi
say "compiling agnhost ($(elapsed))"
(cd $SRC && in_background "compiling agnhost" go build -trimpath -ldflags "-s -w" \
   -o $CACHE/agnhost ./test/images/agnhost)
cp $SRC/test/images/agnhost/porter/localhost.crt $SRC/test/images/agnhost/porter/localhost.key $CACHE/
say "compiling e2e.test (about 3 minutes on 2 cores; $(elapsed))"
(cd $SRC && in_background "compiling e2e.test" go test -c -vet=off -tags "selinux,notest" -trimpath \
   -ldflags "$(kube_ldflags)" -o $CACHE/e2e.test ./test/e2e)
rm -rf $W            # sources and Go cache, not needed once built
echo "$KVER" > $STAMP
say "done in $(elapsed): $CACHE"
