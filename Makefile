# netctl: `make demo` and `make test` do all set-up on a fresh Debian machine (as root).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CNI_BIN := /usr/lib/cni

.PHONY: setup system-packages demo tour test lint unit clean

setup: $(BIN)/netctl system-packages

# Debian's CNI plugins (the real delegates), iproute2, ping for the demo, containerd (1.6,
# with runc) for the tests that drive a real runtime over CRI; podman with runc,
# busybox-static (its test image) and iptables (portmap) for tests/integration/test_podman.py
# and `netctl bench podman`.
system-packages:
	@if [ ! -x $(CNI_BIN)/bridge ] || ! command -v ip >/dev/null || ! command -v ping >/dev/null \
	    || ! command -v containerd >/dev/null; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins \
	    iproute2 iputils-ping containerd; \
	fi
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null || \
	    ! command -v iptables >/dev/null || \
	    ! dpkg-query -W -f '$${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman \
	    runc busybox-static iptables; \
	fi

$(BIN)/netctl: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/netctl

lint: setup
	$(BIN)/ruff check netctl plugin tests
	$(BIN)/mypy netctl plugin
	$(BIN)/lint-imports

test: setup lint
	$(BIN)/pytest -q -m "not soak"

unit: setup
	$(BIN)/pytest -q tests/unit

demo: setup
	bash deploy/demo.sh

tour: setup
	bash deploy/tour.sh

clean:
	rm -rf $(VENV) *.egg-info
