# netctl: `make demo` and `make test` do all set-up on a fresh Debian machine (as root).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CNI_BIN := /usr/lib/cni
PLUGIN := build/plugin/netctl-cni
PLUGIN_SRC := $(wildcard plugin/*.c plugin/*.h)
# The plugin's compiler and flags: C11 with glibc's extensions (memmem, reallocarray),
# every warning an error.
PLUGIN_CC ?= gcc
PLUGIN_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -Wformat=2 -Werror

# The container image (deploy/image/): tagged $(IMAGE), the name deploy/kubernetes/*.yaml
# give (a release pushes it under its registry's name: docs/kubernetes.md, "The image").
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= localhost/netctl:$(VERSION)
BASE_IMAGE ?= localhost/netctl-base:bookworm
# etcd for the tests' real kube-apiserver (tests/realkube.py; the API server itself is
# ../shared/kube/kube-apiserver.gz, or NETCTL_KUBE_APISERVER)
KUBE_ETCD := build/kube/etcd

.PHONY: setup system-packages plugin demo tour test lint unit clean image image-base

setup: system-packages $(BIN)/netctl $(BIN)/netctl-cni $(KUBE_ETCD)

# Debian's CNI plugins (the real delegates), iproute2, ping for the demo, containerd (1.6,
# with runc) for the tests that drive a real runtime over CRI, openssl for the real
# kube-apiserver's certificates (tests/, netctl/kit/kubefake/real.py); podman with runc,
# busybox-static (its test image) and iptables (portmap) for tests/integration/test_podman.py
# and `netctl bench podman`; gcc and libc6-dev (glibc's static libc.a) build the plugin;
# prometheus for its promtool (tests/integration/test_monitoring.py checks
# deploy/monitoring/ with it; the server the package installs is stopped and disabled).
system-packages:
	@if [ ! -x $(CNI_BIN)/bridge ] || ! command -v ip >/dev/null || ! command -v ping >/dev/null \
	    || ! command -v containerd >/dev/null || ! command -v openssl >/dev/null; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins \
	    iproute2 iputils-ping containerd openssl; \
	fi
	@if ! command -v $(PLUGIN_CC) >/dev/null || \
	    ! dpkg-query -W -f '$${Status}' libc6-dev 2>/dev/null | grep -q 'ok installed'; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev; \
	fi
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null || \
	    ! command -v iptables >/dev/null || \
	    ! dpkg-query -W -f '$${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman \
	    runc busybox-static iptables; \
	fi
	@if ! command -v promtool >/dev/null; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
	  && { systemctl disable --now prometheus >/dev/null 2>&1 \
	       || service prometheus stop >/dev/null 2>&1 || true; pkill -x prometheus || true; }; \
	fi

# Debian's etcd-server, taken from its package without installing it (installing starts a
# system service). Without it the real-server tests are skipped, saying how to provide it.
$(KUBE_ETCD):
	@mkdir -p build/kube/deb
	@cd build/kube/deb && { apt-get download etcd-server >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get download etcd-server >/dev/null 2>&1; }; } && \
	  dpkg-deb -x etcd-server_*.deb root && cp root/usr/bin/etcd ../etcd \
	  || echo "make: etcd-server not downloaded: the real kube-apiserver tests will be skipped" >&2
	@rm -rf build/kube/deb

# The thin plugin: a static executable, C against glibc and nothing else (plugin/*.c),
# stripped.
plugin: $(PLUGIN)

$(PLUGIN): $(PLUGIN_SRC)
	@command -v $(PLUGIN_CC) >/dev/null || { echo "make: no C compiler ($(PLUGIN_CC)): make \
	  system-packages installs Debian's gcc and libc6-dev" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(PLUGIN_CC) $(PLUGIN_CFLAGS) -static -s -o $@ $(filter %.c,$^)

# .venv/bin/netctl-cni and netctl-ipam, installed as install-cni installs them anywhere
$(BIN)/netctl-cni: $(PLUGIN) $(BIN)/netctl
	$(BIN)/netctl install-cni --bin-dir $(BIN) --plugin-binary $(PLUGIN)

# netctl, then beside it its kit (netctl/kit/pyproject.toml: the distribution netctl-kit,
# the package netctl_kit, never on a node)
$(BIN)/netctl: pyproject.toml netctl/kit/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q -e netctl/kit
	touch $(BIN)/netctl

# netctl's image, built by podman into its default store (/var/lib/containers/storage):
# the base first if it is missing (image-base), then deploy/image/Containerfile with no
# network. Prints the image's size and how long it took.
image: $(PLUGIN) $(BIN)/netctl
	IMAGE=$(IMAGE) BASE_IMAGE=$(BASE_IMAGE) VENV_PY=$(BIN)/python \
	  bash deploy/image/build.sh

# The base alone: Debian bookworm by mmdebstrap, imported; kept if it exists (FORCE=1 rebuilds)
image-base:
	BASE_IMAGE=$(BASE_IMAGE) FORCE=$(FORCE) bash deploy/image/base.sh

lint: setup
	$(BIN)/ruff check netctl tests
	@# the product, then the kit under its package name (netctl_kit: its sources are netctl/kit/,
	@# and mypy does not follow the editable install's import hook, so a link names them)
	mkdir -p build/typecheck && ln -sfn ../../netctl/kit build/typecheck/netctl_kit
	MYPYPATH=build/typecheck $(BIN)/mypy netctl --exclude 'netctl/kit/'
	MYPYPATH=build/typecheck $(BIN)/mypy -p netctl_kit
	$(BIN)/lint-imports
	@# SQL only in the journal (netctl/journal/) and the kit's one module (netctl/kit/journaldb.py),
	@# the tests' journal reads and hand-written rows included
	@if grep -rnE --include='*.py' "[\"'](SELECT|INSERT INTO|UPDATE [a-z_]+ SET|DELETE FROM|PRAGMA|CREATE (TABLE|INDEX|TRIGGER)|DROP (TABLE|INDEX|TRIGGER)|ALTER TABLE|EXPLAIN)\b" netctl tests \
	    | grep -v '^netctl/journal/\|^netctl/kit/journaldb.py'; then \
	  echo "lint: SQL outside netctl/journal/ and netctl/kit/journaldb.py (above)"; exit 1; fi
	@# the plugin: its build's warnings, implicit conversions, and GCC's static analyzer
	for src in plugin/*.c; do \
	  $(PLUGIN_CC) $(PLUGIN_CFLAGS) -Wconversion -fanalyzer -c -o /dev/null $$src || exit 1; \
	done

# the 25 slowest tests are printed: the suite stays well under 15 minutes
test: setup lint
	$(BIN)/pytest -q -m "not soak" --durations=25

unit: setup
	$(BIN)/pytest -q tests/unit

demo: setup
	bash deploy/demo.sh

tour: setup
	bash deploy/tour.sh

clean:
	rm -rf $(VENV) *.egg-info build
