#!/usr/bin/env bash
# The base of netctl's image (`make image-base`): Debian 12 (bookworm) made from Debian's
# own packages by mmdebstrap and given to `podman import` as $BASE_IMAGE, the name
# deploy/image/Containerfile's FROM uses. No registry is involved.
#
#   deploy/image/base.sh [--force]    # or FORCE=1
#
# An existing $BASE_IMAGE is kept when it was made from the same suite and package list
# (its label netctl.base.recipe), else it is made again.
#
# The package set (mmdebstrap's "custom" variant, smaller than minbase: no apt, perl, bash,
# util-linux, PAM: 79 MB, where the "essential" variant with python3 makes 102 MB):
#   python3        Debian's 3.11 (Python's C-extension wheels in the image are cp311)
#   libstdc++6     manylinux wheels may link it without bundling it (greenlet does)
#   coreutils      chroot(8): the daemon execs a node's delegates as `chroot /host PLUGIN`
#   netbase        /etc/services, /etc/protocols for the socket module's name lookups
#   dpkg and what it runs maintainer scripts with (dash, diffutils, findutils, grep, sed),
#   base-files, base-passwd (/etc/passwd: root), libc-bin (ldconfig).
# The daemon itself execs nothing else: pyroute2 speaks netlink, the delegates and the
# plugin are files of the node's.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

BASE_IMAGE=${BASE_IMAGE:-localhost/netctl-base:bookworm}
SUITE=bookworm
PACKAGES=python3,libstdc++6,coreutils,netbase,dpkg,dash,diffutils,findutils,grep,sed,base-files,base-passwd,libc-bin
RECIPE="$SUITE custom $PACKAGES"
force=${FORCE:-0}
[ "${1:-}" = --force ] && force=1

ensure_packages podman runc
podman_config
have=$(podman image inspect --format '{{index .Labels "netctl.base.recipe"}}' "$BASE_IMAGE" \
  2>/dev/null || true)
if [ "$force" != 1 ] && [ "$have" = "$RECIPE" ]; then
  echo "image-base: $BASE_IMAGE is up to date (FORCE=1 makes it again)"
  exit 0
fi
ensure_packages mmdebstrap

# Where packages come from: the host's own apt sources when they are bookworm's (deb822 or
# one-line; mmdebstrap copies a file named as a MIRROR into the new system's apt sources),
# else mmdebstrap's default (deb.debian.org, with -updates and -security for a stable suite).
sources=()
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  if [ -s "$f" ] && grep -qw "$SUITE" "$f"; then sources=("$f"); break; fi
done
echo "image-base: mmdebstrap $SUITE from ${sources[*]:-the default mirror of mmdebstrap}"

tar=$root/build/image/base.tar
mkdir -p "${tar%/*}"
rm -f "$tar"
# --hook-dir merged-usr: /bin -> usr/bin etc. as debootstrap does, with the usr-is-merged
#   package; otherwise apt picks usrmerge, which pulls in perl (47 MB).
# --dpkgopt path-exclude: no docs (but the copyright files), man or info pages, locales.
# --customize-hook: the apt sources mmdebstrap wrote (no apt in here to read them) and
#   dpkg's backup files; mmdebstrap's own cleanup then removes apt's lists and cache, the
#   logs, /tmp and /run.
# shellcheck disable=SC2016  # the hooks' "$1" is the new root, expanded by mmdebstrap's sh
mmdebstrap --variant=custom --include="$PACKAGES" \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook='rm -f "$1"/etc/apt/sources.list "$1"/etc/apt/sources.list.d/*' \
  --customize-hook='rm -f "$1"/var/lib/dpkg/*-old "$1"/var/cache/debconf/*-old' \
  "$SUITE" "$tar" "${sources[@]}"

old=$(podman image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)
podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/sh"]' \
  --change "LABEL org.opencontainers.image.description=\"Debian $SUITE (mmdebstrap): $PACKAGES\"" \
  --change "LABEL netctl.base.recipe=\"$RECIPE\"" \
  --message "mmdebstrap --variant=custom $SUITE" \
  "$tar" "$BASE_IMAGE" >/dev/null
rm -f "$tar"
new=$(podman image inspect --format '{{.Id}}' "$BASE_IMAGE")
# the base replaced by --force, unless an image (netctl's) is still built on it
if [ -n "$old" ] && [ "$old" != "$new" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
echo "image-base: $BASE_IMAGE $(podman image inspect --format '{{.Size}}' "$BASE_IMAGE") bytes"
