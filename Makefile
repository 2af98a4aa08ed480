# netctl: `make demo` and `make test` do all set-up on a fresh Debian machine (as root).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CNI_BIN := /usr/lib/cni
GO ?= go
PLUGIN := build/plugin/netctl-cni
PLUGIN_SRC := plugin/go.mod $(wildcard plugin/*.go)

.PHONY: setup system-packages plugin demo tour test lint unit clean

setup: system-packages $(BIN)/netctl $(BIN)/netctl-cni

# Debian's CNI plugins (the real delegates), iproute2, ping for the demo, containerd (1.6,
# with runc) for the tests that drive a real runtime over CRI; podman with runc,
# busybox-static (its test image) and iptables (portmap) for tests/integration/test_podman.py
# and `netctl bench podman`; golang-go (Go 1.19) builds the plugin.
system-packages:
	@if [ ! -x $(CNI_BIN)/bridge ] || ! command -v ip >/dev/null || ! command -v ping >/dev/null \
	    || ! command -v containerd >/dev/null; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins \
	    iproute2 iputils-ping containerd; \
	fi
	@if ! command -v $(GO) >/dev/null; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go; \
	fi
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null || \
	    ! command -v iptables >/dev/null || \
	    ! dpkg-query -W -f '$${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman \
	    runc busybox-static iptables; \
	fi

# The thin plugin: a static executable, Go's standard library only (nothing is fetched:
# GOPROXY=off), its build cache in build/ too.
plugin: $(PLUGIN)

$(PLUGIN): $(PLUGIN_SRC)
	@command -v $(GO) >/dev/null || { echo "make: no Go compiler ($(GO)): make \
	  system-packages installs Debian's golang-go" >&2; exit 1; }
	cd plugin && CGO_ENABLED=0 GOPROXY=off GOFLAGS=-buildvcs=false \
	  GOCACHE=$(CURDIR)/build/go-cache $(GO) build -trimpath -ldflags='-s -w' \
	  -o $(CURDIR)/$(PLUGIN) .

# .venv/bin/netctl-cni and netctl-ipam, installed as install-cni installs them anywhere
$(BIN)/netctl-cni: $(PLUGIN) $(BIN)/netctl
	$(BIN)/netctl install-cni --bin-dir $(BIN) --plugin-binary $(PLUGIN)

$(BIN)/netctl: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/netctl

lint: setup
	$(BIN)/ruff check netctl tests
	$(BIN)/mypy netctl
	$(BIN)/lint-imports
	@test -z "$$(gofmt -l plugin)" || { gofmt -l plugin; echo "gofmt: not formatted" >&2; exit 1; }
	cd plugin && GOCACHE=$(CURDIR)/build/go-cache $(GO) vet ./...

test: setup lint
	$(BIN)/pytest -q -m "not soak"

unit: setup
	$(BIN)/pytest -q tests/unit

demo: setup
	bash deploy/demo.sh

tour: setup
	bash deploy/tour.sh

clean:
	rm -rf $(VENV) *.egg-info build
