# Shared by hack/build-*.sh (sourced): Debian packages and private source lists.

# install_missing WHAT PKG...: apt-get install those of PKG that are not installed
install_missing() {
  local what=$1 need="" p
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
  done
  if [ -n "$need" ]; then
    say "installing $what:$need"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
      --no-install-recommends $need >/dev/null
  fi
}

# private_apt DIR SUITE: sets the array APTO, apt-get options for a private apt state
# under DIR whose only source is "deb-src <this machine's Debian mirror> SUITE main"
# (the system's own sources and lists are not touched)
private_apt() {
  local dir=$1 suite=$2 uri
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/src"
  uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  [ -n "$uri" ] || uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
  echo "deb-src $uri $suite main" > "$dir/sources.list"
  APTO=(-o Dir::Etc::SourceList="$dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
        -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache")
}

# Kubernetes v1.20.2 from Debian 12's source package, for build-kubernetes.sh and
# build-conformance.sh (the same tree, the same fixes).
KVER=1.20.5+really1.20.2-1.1+deb12u1     # Debian source version (pinned)
KTAG=v1.20.2                              # what the binaries report

# kube_build_begin WHAT STAMP: exit at once when the file STAMP names $KVER; else
# start the build's clock, with say/elapsed printing as WHAT
kube_build_begin() {
  if [ -f "$2" ] && [ "$(cat "$2")" = "$KVER" ]; then
    exit 0
  fi
  KUBE_WHAT=$1
  T0=$(date +%s)
  export DEBIAN_FRONTEND=noninteractive
  say() { printf '%s: %s\n' "$KUBE_WHAT" "$*"; }
  elapsed() { echo "$(( $(date +%s) - T0 ))s"; }
}

# kube_source W: unpack the tree into $W/gopath/src/k8s.io/kubernetes (kept while
# $W is), replace its vendored reflect2 with Debian's 1.0.2 (the vendored 1.0.1
# crashes under Go >= 1.18) and set SRC; the .debs of etcd go to $W/x too
kube_source() {
  local W=$1 A=$1/apt V
  SRC=$W/gopath/src/k8s.io/kubernetes
  mkdir -p $A/src $W/debs
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
}

# kube_ldflags: -ldflags for binaries that report $KTAG
kube_ldflags() {
  local LD="-s -w" pkg=k8s.io/kubernetes/vendor kv
  for kv in gitVersion=$KTAG gitMajor=1 gitMinor=20 gitTreeState=clean \
            gitCommit=faecb196815e248d3ecfb03c680a4507229c2a56 buildDate=2021-01-13T13:20:00Z; do
    LD="$LD -X $pkg/k8s.io/component-base/version.$kv -X $pkg/k8s.io/client-go/pkg/version.$kv"
  done
  echo "$LD"
}

# in_background WHAT CMD...: run CMD, saying every 20 s that it still runs
in_background() {
  local what=$1 pid
  shift
  "$@" &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    sleep 20
    kill -0 $pid 2>/dev/null && say "still $what ($(elapsed))"
  done
  wait $pid
}
