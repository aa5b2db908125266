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
