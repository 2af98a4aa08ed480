#!/usr/bin/env bash
# `make image`: netctl's container image, built by Debian 12's podman (4.3) into podman's
# default store, tagged $IMAGE.
#
#   deploy/image/build.sh      # after `make setup` and `make plugin` (make image runs them)
#
# 1. the base image, unless it is up to date (deploy/image/base.sh: mmdebstrap, podman import)
# 2. the build context, build/image/context, made on the host: netctl's dependencies with
#    .venv's pip (from PyPI or pip's cache), pinned to the versions installed in .venv
#    (those the tests ran with), wheels only; netctl itself; the static plugin
# 3. podman build --network=none --pull=never: no step of the build reaches anything.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
cd "$root"
SECONDS=0

PY=${VENV_PY:-.venv/bin/python}  # make setup's venv: its pip, and the versions it pins
PLUGIN=build/plugin/netctl-cni
BASE_IMAGE=${BASE_IMAGE:-localhost/netctl-base:bookworm}
work=build/image
ctx=$work/context

die() { echo "image: $*" >&2; exit 1; }
[ -x "$PY" ] || die "no $PY: run \`make setup\` first"
[ -x "$PLUGIN" ] || die "no $PLUGIN: run \`make plugin\` first"
# The image's python3 is Debian 12's 3.11: the C extensions pip picks must be cp311.
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "$PY is not Python 3.11, the image's (Debian 12's) version"

project() {  # a field of pyproject.toml's [project] table, one line per list item
  "$PY" -c 'import sys, tomllib
v = tomllib.load(open("pyproject.toml", "rb"))["project"][sys.argv[1]]
print(*(v if isinstance(v, list) else [v]), sep="\n")' "$1"
}
version=$(project version)
IMAGE=${IMAGE:-localhost/netctl:$version}

# 1. the base
BASE_IMAGE=$BASE_IMAGE bash "$here/base.sh"
podman_config

# 2a. the dependencies: reinstalled only when the list, the pins or the interpreter change
# (podman's layer cache goes by the files' contents: unchanged ones keep their layers and
# the compiled bytecode; this saves pip's time).
mkdir -p "$ctx"
mapfile -t deps < <(project dependencies)
"$PY" -m pip freeze --exclude-editable | grep -E '^[A-Za-z0-9._-]+==' > "$work/constraints.txt"
key=$({ printf '%s\n' "${deps[@]}"; cat "$work/constraints.txt"; "$PY" -VV; } | sha256sum)
if [ ! -d "$ctx/deps" ] || [ "$(cat "$work/deps.key" 2>/dev/null)" != "$key" ]; then
  echo "image: installing ${#deps[@]} dependencies (and theirs) into $ctx/deps"
  rm -rf "$ctx/deps" "$work/deps.key"
  "$PY" -m pip install --quiet --disable-pip-version-check --target "$ctx/deps" \
    --no-compile --only-binary=:all: --constraint "$work/constraints.txt" "${deps[@]}"
  # Not needed at run time: console scripts (their #! names .venv), C headers and sources,
  # type stubs, the packages' own test suites (greenlet, aiosqlite, certifi), and the
  # README/CHANGELOG/pyproject.toml one wheel puts at the top of site-packages.
  rm -rf "$ctx/deps/bin" "$ctx/deps/include"
  find "$ctx/deps" -mindepth 2 -maxdepth 2 -type d -name tests -exec rm -rf {} +
  find "$ctx/deps" -type f \( -name '*.pyi' -o -name '*.c' -o -name '*.h' -o -name '*.pyx' \
    -o -name '*.pxd' \) -delete
  rm -f "$ctx/deps"/{README,CHANGELOG,CONTRIBUTING}.md "$ctx/deps/pyproject.toml"
  echo "$key" > "$work/deps.key"
fi

# 2b. netctl, built from a copy of the working tree (setuptools writes build/ and
# *.egg-info next to the sources it builds, and this tree is shared); built again only when
# one of its files changed (pip's isolated build takes 5 to 15 s; the tests run make image
# twice a session: the node-density bench, then the DaemonSet's test). The key is kept in
# the copy, which every build of the app removes first (this script's older versions too).
build_app() {
  rm -rf "${work:?}/src" "${ctx:?}/app" "${ctx:?}/bin"
  mkdir -p "$work/src" "$ctx/bin"
  cp -r pyproject.toml netctl migrations "$work/src/"
  find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
  "$PY" -m pip install --quiet --disable-pip-version-check --target "$ctx/app" --no-deps \
    --no-compile "$work/src"
  # Not on a node: the kit (netctl/kit: benches, the fake API server, the harness, the
  # demo's scaffolding) is a distribution of its own (netctl-kit), not in netctl's wheel;
  # nothing of it is left in the image. `netctl` offers no `netctl bench` there.
  rm -rf "$ctx/app/bin" "$ctx/app/netctl/kit"
  # the console scripts of [project.scripts], for the image's /usr/bin/python3
  "$PY" - "$ctx/bin" <<'EOF'
import sys, tomllib
for name, ref in tomllib.load(open("pyproject.toml", "rb"))["project"]["scripts"].items():
    module, func = ref.split(":")
    with open(f"{sys.argv[1]}/{name}", "w") as fh:
        fh.write(f"#!/usr/bin/python3\n# pyproject.toml: {name} = \"{ref}\"\nimport sys\n"
                 f"from {module} import {func}\n\nif __name__ == \"__main__\":\n"
                 f"    sys.exit({func}())\n")
EOF
}
app_key=$({ find pyproject.toml netctl migrations -name __pycache__ -prune -o -type f -print0 \
              | LC_ALL=C sort -z | xargs -0 sha256sum; "$PY" -VV; } | sha256sum)
if [ ! -d "$ctx/app" ] || [ ! -d "$ctx/bin" ] \
    || [ "$(cat "$work/src/.app-key" 2>/dev/null)" != "$app_key" ]; then
  build_app
  echo "$app_key" > "$work/src/.app-key"
fi
cp "$PLUGIN" "$ctx/netctl-cni"

# 3. the image
revision=$(git rev-parse HEAD 2>/dev/null || true)
if [ -n "$revision" ] && [ -n "$(GIT_OPTIONAL_LOCKS=0 git status --porcelain 2>/dev/null)" ]; then
  revision+=-dirty
fi
tags=(--tag "$IMAGE")
old=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build --network=none --pull=never --layers --file "$here/Containerfile" "${tags[@]}" \
  --build-arg BASE_IMAGE="$BASE_IMAGE" \
  --build-arg VERSION="$version" \
  --build-arg DESCRIPTION="$(project description)" \
  --build-arg REVISION="$revision" \
  --build-arg SOURCE="$(git remote get-url origin 2>/dev/null || true)" \
  "$ctx"
new=$(podman image inspect --format '{{.Id}}' "$IMAGE")
# the image this one replaces, unless something still uses or names it
if [ -n "$old" ] && [ "$old" != "$new" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi

size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo
podman images --format '{{.Repository}}:{{.Tag}}  {{.ID}}  {{.Size}}' \
  | grep -F -e "$IMAGE " -e "$BASE_IMAGE " || true
echo "image: $IMAGE: $size bytes ($((size / 1000000)) MB); make image took ${SECONDS} s"
echo "image: podman as make image ran it (deploy/image/podman-env): CONTAINERS_CONF=$CONTAINERS_CONF"
