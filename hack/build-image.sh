#!/bin/bash
# `make image`: Pacific's container image (pacific-controller, pacific-node, the
# CNI plugin), built without a container engine or registry:
#   1. a Debian 12 root file system from Debian's archive (debootstrap, minbase)
#      with the run-time packages deploy/Containerfile names (read from it, so the
#      two cannot drift apart);
#   2. Pacific and its Python dependencies as wheels built here (pip, PyPI), then
#      installed into /opt/pacific inside the root file system, offline
#      (--no-index), with the image's own python3;
#   3. written as a single-layer OCI archive (`ctr images import`, `podman load`).
# Output: $PACIFIC_IMAGE_OUT (default _output/pacific-image.tar), named
# $PACIFIC_IMAGE (default localhost/pacific:<version>).  The root file system is
# cached under $PACIFIC_IMAGE_CACHE (default /var/cache/pacific/image) and
# rebuilt only when deploy/Containerfile's package list changes.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -1)
NAME=${PACIFIC_IMAGE:-localhost/pacific:$VERSION}
OUT=${PACIFIC_IMAGE_OUT:-_output/pacific-image.tar}
CACHE=${PACIFIC_IMAGE_CACHE:-/var/cache/pacific/image}
BASE=$CACHE/base            # debootstrap result (kept)
ROOT=$CACHE/rootfs          # base + Pacific (rebuilt each time)
say() { printf 'image: %s\n' "$*"; }
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 ))s"; }
export DEBIAN_FRONTEND=noninteractive

# the run stage's (the last stage's) apt-get install line(s) of deploy/Containerfile
PKGS=$(awk '/^FROM/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' deploy/Containerfile \
  | sed -n '/apt-get install/,/rm -rf/p' | tr ' \\' '\n\n' \
  | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vE '^(apt-get|install|rm|y|DEBIAN_FRONTEND=.*)$' \
  | sort -u | tr '\n' ' ')
[ -n "$PKGS" ] || { echo "image: no packages found in deploy/Containerfile's run stage" >&2; exit 1; }
PKGS="$PKGS python3-venv"
for p in debootstrap; do
  dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q 'install ok installed' || {
    say "installing $p"; apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends $p >/dev/null; }
done
STAMP="bookworm minbase $(echo $PKGS | tr ' ' '\n' | sort | tr '\n' ' ')"
if [ ! -f $BASE/.pacific-base ] || [ "$(cat $BASE/.pacific-base)" != "$STAMP" ]; then
  uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  [ -n "$uri" ] || uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
  rm -rf $BASE; mkdir -p $BASE
  say "debootstrap bookworm (minbase) from $uri with: $PKGS"
  debootstrap --variant=minbase --include="$(echo $PKGS | tr ' ' ',')" bookworm $BASE "$uri" \
    | grep -E '^I: (Retrieving|Validating|Installing|Configuring|Base system)' | awk 'NR%40==1' || true
  [ -x $BASE/usr/bin/python3 ] || { echo "image: debootstrap failed (see $BASE/debootstrap/debootstrap.log)" >&2; exit 1; }
  chroot $BASE apt-get clean
  rm -rf $BASE/var/lib/apt/lists/* $BASE/var/cache/apt/*.bin $BASE/var/log/* $BASE/debootstrap \
    $BASE/usr/share/doc/* $BASE/usr/share/man/* $BASE/usr/share/info/* $BASE/usr/share/locale/*
  echo "$STAMP" > $BASE/.pacific-base
  say "base root file system ready ($(elapsed))"
fi

# the current Open vSwitch and OVN (hack/build-ovs-ovn.sh, `make ovs`), as the
# Containerfile's ovs stage builds them: the same programs as the sandbox's nodes
# run, at the prefix they were built for (their libraries and files are found there)
OVSP=$(readlink -f "${PACIFIC_OVS_PREFIX:-/var/cache/pacific/ovs/current}" 2>/dev/null || true)
if [ -z "$OVSP" ] || [ ! -f "$OVSP/.built" ]; then
  echo "image: no Open vSwitch / OVN build at ${PACIFIC_OVS_PREFIX:-/var/cache/pacific/ovs/current}: run \`make ovs\` first" >&2
  exit 1
fi

# nothing to do when the archive was made from these sources and this base
SRC_STAMP=$( (echo "$STAMP $NAME $OVSP $(cat $OVSP/.built)"; find pacific pyproject.toml -type f \( -name '*.py' -o -name '*.toml' \
  -o -name '*.typed' -o -name '*.c' -o -name pacific-cni \) | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1)
if [ -f "$OUT" ] && [ "$(cat "$OUT.stamp" 2>/dev/null)" = "$SRC_STAMP" ]; then
  say "$OUT is up to date ($NAME)"; exit 0
fi
say "building Pacific's wheels"
W=$CACHE/wheels; rm -rf $W; mkdir -p $W
PIP=.venv/bin/pip; [ -x $PIP ] || PIP="python3 -m pip"
$PIP wheel -q --wheel-dir $W . 2>&1 | grep -v "is ignored" | tail -5 || true
ls $W/pacific-*.whl >/dev/null
say "installing into /opt/pacific ($(ls $W | wc -l) wheels)"
rm -rf $ROOT; cp -a $BASE $ROOT; rm -f $ROOT/.pacific-base
mkdir -p $ROOT/tmp/wheels; cp $W/*.whl $ROOT/tmp/wheels/
mount -t proc proc $ROOT/proc
trap 'umount $ROOT/proc 2>/dev/null || true' EXIT
IN=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot $ROOT)   # nothing of this host's pip config
"${IN[@]}" /usr/bin/python3 -m venv /opt/pacific
"${IN[@]}" /opt/pacific/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wheels pacific
say "adding Open vSwitch and OVN from $OVSP ($(du -sh --exclude=include $OVSP | cut -f1))"
mkdir -p $ROOT$OVSP
(cd $OVSP && tar -cf - --exclude=./include --exclude='*.la' .) | tar -xf - -C $ROOT$OVSP
for prog in sbin/ovsdb-server bin/ovn-northd; do   # (no /etc/hosts in the chroot: quiet)
  "${IN[@]}" $OVSP/$prog --version >/dev/null 2>&1 || { echo "image: $prog does not run in the image" >&2; exit 1; }
done
"${IN[@]}" /opt/pacific/bin/pacific-node --help >/dev/null
"${IN[@]}" /opt/pacific/bin/pacific-controller --help >/dev/null
"${IN[@]}" /opt/pacific/bin/pacific-central --help >/dev/null
umount $ROOT/proc; trap - EXIT
rm -rf $ROOT/tmp/wheels $ROOT/root/.cache
find $ROOT/opt/pacific -name __pycache__ -prune -exec rm -rf {} +
say "writing $OUT as $NAME"
mkdir -p "$(dirname "$OUT")"
.venv/bin/python -m pacific.sandbox.k8s.images pack --rootfs $ROOT --out "$OUT" --name "$NAME" \
  --env PATH=/opt/pacific/bin:$OVSP/bin:$OVSP/sbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PACIFIC_OVS_PREFIX=$OVSP \
  --env PYTHONUNBUFFERED=1 --cmd pacific-controller --cmd=--help
echo "$SRC_STAMP" > "$OUT.stamp"
say "done in $(elapsed): $OUT ($(du -h "$OUT" | cut -f1)), import with: ctr -n k8s.io images import $OUT"
