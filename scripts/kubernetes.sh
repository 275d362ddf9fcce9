#!/usr/bin/env bash
# Builds the Kubernetes control plane the tests run (tests/kubernetes_testbed.py)
# from Debian 12's own `kubernetes` source package (1.20.5+really1.20.2: the
# upstream 1.20.2 tree with its vendor/ folder) with Debian's Go, once per
# machine, into a cache outside the repository:
#
#   ${MUSTER_KUBE_CACHE:-/var/cache/muster/kubernetes-1.20.2}/bin/
#     kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl pause
#
# kubectl is built from the same tree rather than taken from Debian's
# kubernetes-client, which conflicts with the kubectl that Google's Cloud SDK
# packages install, and so that client and server are the same version.
#
# Steps (each skipped when its result is there; a stamp makes a second run
# instant; a lock makes a concurrent caller wait instead of building twice):
#   a) a deb-src entry for Debian's own mirror (/etc/apt/sources.list.d/
#      muster-deb-src.sources, made from debian.sources) and `apt-get update`;
#   b) `apt-get source kubernetes` into <cache>/work;
#   c) `make WHAT=...` for the five Go programs (make generates code they need);
#   d) the pause binary from build/pause/linux/pause.c, linked statically;
#   e) the binaries into <cache>/bin, the stamp, and <cache>/work (source tree
#      and Go build cache, a few GB) removed. MUSTER_KUBE_KEEP_WORK=1 keeps it,
#      so a rebuild after deleting the stamp starts from a warm Go cache.
# The build's output goes to <cache>/build.log; its tail is printed on failure.
# Needs root to build (apt, the cache); as another user it builds nothing
# and says so. Afterwards it only reads the stamp.
set -euo pipefail

version=1.20.2
cache="${MUSTER_KUBE_CACHE:-/var/cache/muster/kubernetes-$version}"
bin="$cache/bin"
stamp="$bin/.built"
programs=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl pause)

built() {
  [ -f "$stamp" ] || return 1
  for p in "${programs[@]}"; do [ -x "$bin/$p" ] || return 1; done
}

built && exit 0

if [ "$(id -u)" -ne 0 ]; then
  # The testbed needs root too (network namespaces, containerd, kubelets), so
  # on a machine where this cannot build, its tests skip and say why.
  echo "kubernetes.sh: not root, so the Kubernetes control plane is not built and its tests will skip" >&2
  exit 0
fi

fail() {
  echo "kubernetes.sh: $*" >&2
  exit 1
}

mkdir -p "$cache" || fail "cannot create the cache $cache (set MUSTER_KUBE_CACHE to a writable folder)"
exec 9>"$cache/.lock"
flock 9
built && exit 0   # another caller built it while this one waited

for tool in go rsync jq gcc make dpkg-source apt-get; do
  command -v "$tool" >/dev/null 2>&1 ||
    fail "$tool is missing: run scripts/setup.sh (it installs golang-go, rsync, jq, build-essential, dpkg-dev)"
done

log="$cache/build.log"
: >"$log"
step=""
on_error() {
  echo "kubernetes.sh: failed while $step; the last lines of $log:" >&2
  tail -n 40 "$log" >&2 || true
}
trap on_error ERR

start=$(date +%s)
work="$cache/work"
mkdir -p "$work"

# a) deb-src. apt-get source needs one; the machine's sources have only deb.
step="adding a deb-src entry for Debian's mirror"
if ! apt-get indextargets --format '$(CREATED_BY)' 2>/dev/null | grep -q '^Sources$'; then
  src=/etc/apt/sources.list.d/debian.sources
  [ -f "$src" ] || fail "$src is missing; add a deb-src line for bookworm by hand and run again"
  sed 's/^Types:.*/Types: deb-src/' "$src" >/etc/apt/sources.list.d/muster-deb-src.sources
  echo "kubernetes.sh: added /etc/apt/sources.list.d/muster-deb-src.sources; apt-get update"
  apt-get update -qq >>"$log" 2>&1
fi

# b) the source package, unpacked with Debian's patches.
step="fetching the kubernetes source package (apt-get source kubernetes)"
tree=$(find "$work" -maxdepth 1 -type d -name "kubernetes-*$version*" | head -n 1)
if [ -z "$tree" ] || [ ! -f "$tree/build/pause/linux/pause.c" ]; then
  echo "kubernetes.sh: fetching Debian's kubernetes source package"
  (cd "$work" && apt-get source -qq kubernetes) >>"$log" 2>&1
  tree=$(find "$work" -maxdepth 1 -type d -name "kubernetes-*$version*" | head -n 1)
  [ -n "$tree" ] || fail "apt-get source kubernetes gave no kubernetes-*$version* tree in $work (see $log)"
fi

# c) the Go programs, with make (it generates code the apiserver needs, so a
# plain module-mode `go build` of it fails). Go's caches stay under the work
# folder; nice keeps a parallel C++ build responsive.
export GOCACHE="$work/gocache" GOPATH="$work/gopath" GOTOOLCHAIN=local
export KUBE_GIT_VERSION="v$version" KUBE_GIT_TREE_STATE=clean
step="building the Kubernetes programs (make in $tree)"
echo "kubernetes.sh: building Kubernetes $version from Debian's source with $(go version | cut -d' ' -f3)" \
  "(about 10 minutes on 2 cores; log: $log)"
(cd "$tree" && nice -n 10 make \
  WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet cmd/kubectl") >>"$log" 2>&1
out="$tree/_output/bin"
[ -x "$out/kube-apiserver" ] || out="$tree/_output/local/bin/linux/amd64"

# d) pause: the sandbox's first process, for the locally built pause image.
step="compiling pause ($tree/build/pause/linux/pause.c)"
gcc -O2 -static -DVERSION="v$version-muster" -o "$work/pause" "$tree/build/pause/linux/pause.c" >>"$log" 2>&1

# e) install, stamp, clean.
step="installing into $bin"
mkdir -p "$bin"
for p in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [ -x "$out/$p" ] || fail "make did not produce $p (looked in $out; see $log)"
  install -m 0755 "$out/$p" "$bin/$p"
done
install -m 0755 "$work/pause" "$bin/pause"
"$bin/kube-apiserver" --version >>"$log" 2>&1
{
  echo "kubernetes $version from Debian's source package ($(basename "$tree"))"
  echo "built $(date -u +%FT%TZ) with $(go version | cut -d' ' -f3) in $(( $(date +%s) - start )) s"
} >"$stamp"
trap - ERR
if [ "${MUSTER_KUBE_KEEP_WORK:-0}" != 1 ]; then
  chmod -R u+w "$work" 2>/dev/null || true   # Go's module cache is read-only
  rm -rf "$work"
fi
echo "kubernetes.sh: built in $(( $(date +%s) - start )) s into $bin"
