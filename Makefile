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

.PHONY: setup system-packages plugin plugin-sanitized fuzz fuzz-run test-sanitized demo tour \
	test lint unit clean image image-base

setup: system-packages $(BIN)/netctl $(BIN)/netctl-cni $(KUBE_ETCD)

# Debian's CNI plugins (the real delegates), iproute2, ping for the demo, containerd (1.6,
# with runc) for the tests that drive a real runtime over CRI, openssl for the real
# kube-apiserver's certificates (tests/, netctl/kit/kubefake/real.py); podman with runc,
# busybox-static (its test image) and iptables (portmap) for tests/integration/test_podman.py
# and `netctl bench podman`; gcc and libc6-dev (glibc's static libc.a) build the plugin;
# prometheus for its promtool (tests/integration/test_monitoring.py checks
# deploy/monitoring/ with it; the server the package installs is stopped and disabled);
# clang with its compiler-rt (libclang-rt: libFuzzer and the sanitizers' runtimes) builds
# the fuzz targets (`make fuzz`).
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
	@if ! command -v $(FUZZ_CC) >/dev/null || ! ls $(FUZZ_RT) >/dev/null 2>&1; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang-14 \
	    libclang-rt-14-dev; \
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

# The plugin with AddressSanitizer and UndefinedBehaviorSanitizer, for its tests
# (`make test-sanitized`: NETCTL_PLUGIN_SANITIZED=1 makes them exec it, tests/conftest.py):
# linked dynamically (against the shared libc), never installed on a node; built by clang,
# whose one runtime for both sanitizers writes every report where log_path says (GCC's
# libubsan writes its own to stderr whatever the options). tests/sanitizer_options.c gives
# its defaults: a report aborts it and is written to build/plugin-asan/reports/report.<pid>,
# which the tests look at after each test.
PLUGIN_ASAN := build/plugin-asan/netctl-cni
SANITIZE := -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all

plugin-sanitized: $(PLUGIN_ASAN)

$(PLUGIN_ASAN): $(PLUGIN_SRC) tests/sanitizer_options.c
	@command -v $(FUZZ_CC) >/dev/null || { echo "make: no $(FUZZ_CC): make system-packages \
	  installs Debian's clang-14 and libclang-rt-14-dev" >&2; exit 1; }
	@mkdir -p $(dir $@)reports
	$(FUZZ_CC) $(PLUGIN_CFLAGS) $(SANITIZE) \
	  -DNETCTL_SANITIZER_LOG='"$(abspath $(dir $@))/reports/report"' -o $@ $(filter %.c,$^)

# libFuzzer targets (tests/fuzz/fuzz_*.c) over the plugin's JSON scanner, the reply parser
# and the frame, with AddressSanitizer and UndefinedBehaviorSanitizer; the plugin's sources
# are compiled in with tests/fuzz/arena.h (their allocations released after each input).
# `make fuzz-run` runs each in turn over its corpus (tests/fuzz/corpus/<target>/, read only;
# what it finds goes to build/fuzz/corpus/<target>/), FUZZ_RUNS inputs each, one process at a
# time and niced; a finding is left in build/fuzz/artifacts/.
FUZZ_CC ?= clang-14
FUZZ_RT := /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a
FUZZ_TARGETS := json reply frame
FUZZ_BINS := $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iplugin
FUZZ_PLUGIN := plugin/buf.c plugin/json.c plugin/frame.c
FUZZ_RUNS ?= 10000000

fuzz: $(FUZZ_BINS)

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/arena.c tests/fuzz/arena.h tests/fuzz/check.h \
		$(PLUGIN_SRC)
	@command -v $(FUZZ_CC) >/dev/null || { echo "make: no $(FUZZ_CC): make system-packages \
	  installs Debian's clang-14 and libclang-rt-14-dev" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -include tests/fuzz/arena.h -o $@ $< tests/fuzz/arena.c \
	  $(FUZZ_PLUGIN)

fuzz-run: $(FUZZ_BINS)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus/$$t build/fuzz/artifacts && \
	  echo "== fuzz_$$t: $(FUZZ_RUNS) runs" && start=$$(date +%s) && \
	  nice -n 19 build/fuzz/fuzz_$$t -runs=$(FUZZ_RUNS) -print_final_stats=1 \
	    -dict=tests/fuzz/json.dict -artifact_prefix=build/fuzz/artifacts/$$t- \
	    build/fuzz/corpus/$$t tests/fuzz/corpus/$$t || exit 1; \
	  echo "== fuzz_$$t: done in $$(( $$(date +%s) - start )) s"; \
	done

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

# the 25 slowest tests are printed: the suite stays well under 15 minutes; then the plugin's
# own tests again, through the sanitized build
test: setup lint
	$(BIN)/pytest -q -m "not soak" --durations=25
	$(MAKE) --no-print-directory test-sanitized

# The plugin's own tests (SANITIZED_TESTS) exec'ing build/plugin-asan/netctl-cni
SANITIZED_TESTS := tests/unit/test_plugin_frame.py
test-sanitized: setup $(PLUGIN_ASAN)
	NETCTL_PLUGIN_SANITIZED=1 $(BIN)/pytest -q $(SANITIZED_TESTS)

unit: setup
	$(BIN)/pytest -q tests/unit

demo: setup
	bash deploy/demo.sh

tour: setup
	bash deploy/tour.sh

clean:
	rm -rf $(VENV) *.egg-info build
