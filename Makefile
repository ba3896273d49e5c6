# kbroker — the two commands of README.md: `make run` and `make test`.
# Debian's /usr/bin/python3.11 (built with PGO and LTO: the simulator and the broker take 10-15 % less CPU
# on it than on a plain build such as pyenv's) when it can make a venv whose C helpers build (ensurepip,
# from python3.11-venv, and Python.h, from python3.11-dev; `make test-deps` installs them); else python3.
# `make PYTHON=...` chooses another. Expanded when used, so after debian-python has installed them.
DEBIAN_PYTHON := /usr/bin/python3.11
DEBIAN_PYTHON_OK = $(shell $(DEBIAN_PYTHON) -c 'import ensurepip, os, sys, sysconfig; \
  sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))' 2>/dev/null && echo yes)
PYTHON ?= $(if $(DEBIAN_PYTHON_OK),$(DEBIAN_PYTHON),python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# With Debian's python3.11 there (bookworm's python3), the targets that install Debian packages first
# install its venv and headers if missing (sudo apt-get); `make run` and `make venv` install nothing
# and fall back to python3.
PYTHON_PKGS := $(if $(filter-out run venv sim clean,$(MAKECMDGOALS)),debian-python)

.PHONY: run test venv test-deps debian-python FORCE kcat zookeeper prometheus bench soak fuzz sim clean lint typecheck loadtest test-images image image-kbroker image-prometheus image-zookeeper

# setup.py builds the five C helpers in place (storage/_record_walk.c, the produce path's record walk;
# protocol/_produce_codec.c, the Produce request decoder and response encoder;
# storage/_write_window.c, appends without a descriptor; broker/_request_stats.c, the request metrics;
# broker/_tls_read.c, TLS connections' reads).
# $(VENV)/.python names the interpreter PYTHON is (rewritten only when that changes): a venv made on
# another one is made again (--clear), its packages and C helpers installed again.
$(STAMP): pyproject.toml setup.py storage/_record_walk.c storage/_write_window.c broker/_request_stats.c protocol/_produce_codec.c broker/_tls_read.c $(VENV)/.python | $(PYTHON_PKGS)
	@p=$$(cat $(VENV)/.python); if [ -x $(PY) ] && [ "$$(readlink -f $(PY))" != "$$p" ]; then \
	  echo "$(VENV) was made on $$(readlink -f $(PY)), PYTHON is $$p: making it again"; \
	  $(PYTHON) -m venv --clear $(VENV) && echo "$$p" > $(VENV)/.python; fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.python: FORCE | $(PYTHON_PKGS)
	@p=$$($(PYTHON) -c 'import os, sys; print(os.path.realpath(sys.executable))') || exit 1; \
	test "$$(cat $@ 2>/dev/null)" = "$$p" || { mkdir -p $(VENV) && echo "$$p" > $@; }

FORCE:

debian-python:
	@test ! -x $(DEBIAN_PYTHON) || test -n "$(DEBIAN_PYTHON_OK)" || { \
	  echo "installing python3.11-venv, python3.11-dev (Debian packages)"; \
	  $(SUDO) apt-get -o DPkg::Lock::Timeout=600 update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive \
	    apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3.11-venv python3.11-dev >/dev/null; }

venv: $(STAMP)

$(TSTAMP): $(STAMP) pyproject.toml
	$(PIP) install --quiet -e '.[test,loadgen]'
	touch $@

# Debian's kcat (librdkafka 2.0.2) is one of the real clients the compat tests drive.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (Debian package)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }

# Debian's ZooKeeper (3.8): the coordinator of standby controllers (controller.metadata.store=zookeeper);
# tests start it with java -cp /usr/share/java/zookeeper.jar (controller/launcher.py ZooKeeperProcess).
zookeeper:
	@test -e /usr/share/java/zookeeper.jar || { \
	  echo "installing zookeeper (Debian package)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq zookeeper >/dev/null; }

# Debian's prometheus (and promtool): tests/metrics scrape a cluster with a real Prometheus.
prometheus:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  echo "installing prometheus (Debian package)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
	    install -y -qq prometheus >/dev/null; }

test-deps: $(TSTAMP) kcat zookeeper prometheus

# A single-node cluster on 127.0.0.1:9092, data under ./data.
run: $(STAMP)
	$(VENV)/bin/kbroker serve -c config/server.properties

# Most of the suite waits (on clusters' timeouts) with a core idle, so two runs go side by side:
# the rest of the suite, and beside it .ci/beside-tests: tests/loadgen (the Spark replays, ~4-7
# minutes, mostly one core) while it builds the images (on a fresh machine debootstrap takes ~9
# minutes, mostly waiting on the mirror: before, nothing ran while it did), then tests/deploy (the
# images and docker-compose) once both are done. The beside run's output is kept in
# build/beside-tests.log and printed after, the images' in build/images.log. With PYTEST_ARGS,
# the images are built first and one run does what they name. Each compose project has its own
# name and free ports; the ports the harnesses pick (controller.launcher.free_port) come from
# below the kernel's ephemeral range, so the other run's outgoing connections cannot take one
# before its broker binds it. --durations: the slowest tests, to keep CI within its 30 minutes.
# tests/sim runs in a process of its own, in the beside run once tests/deploy is done (about a
# third into the main run; niced: its seed range keeps a core busy for ~5 minutes): a simulation
# swaps time.*, the global random, uuid4 and os.urandom for the process, so a broker another test
# left running on a thread (the session-scoped bootstrap fixture of tests/conftest.py) would read
# simulated time and draw from a seed's stream. (Run after the main run instead, it made CI 29
# minutes of its 30.)
# BESIDE_TESTS: what .ci/beside-tests runs (the main run leaves them out).
BESIDE_TESTS := tests/loadgen tests/deploy tests/sim
test: test-deps typecheck
ifeq ($(strip $(PYTEST_ARGS)),)
	@mkdir -p build; date -u +"make test: start %T"; \
	.ci/beside-tests $(PY) $(MAKE) > build/beside-tests.log 2>&1 & beside=$$!; \
	$(PY) -m pytest -q -m "not slow" --durations=30 $(addprefix --ignore=,$(BESIDE_TESTS)); rest=$$?; \
	date -u +"main run done %T"; \
	wait $$beside; besides=$$?; \
	echo "== $(BESIDE_TESTS), run beside the rest (exit status $$besides):"; cat build/beside-tests.log; \
	date -u +"make test: end %T"; \
	test $$rest -eq 0 && test $$besides -eq 0
else
	$(MAKE) --no-print-directory test-images
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)
endif

# tests/deploy (marker docker) start docker-compose.yml: with a Docker engine answering, build
# the images (cached on the machine: seconds) and install Debian's docker-compose if missing;
# without one, say that those tests will be skipped.
test-images:
	@if docker info >/dev/null 2>&1; then \
	  command -v docker-compose >/dev/null 2>&1 || { echo "installing docker-compose (Debian package)"; \
	    $(SUDO) apt-get -o DPkg::Lock::Timeout=600 update -qq && \
	    $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq docker-compose >/dev/null; }; \
	  $(MAKE) --no-print-directory -j3 image; \
	else echo "make test: the Docker engine does not answer (docker info failed): tests/deploy will be skipped"; fi

# Long soaks / crash loops (not in CI).
soak: test-deps
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

# The fuzz run of tests/robustness/test_fuzz.py for 10 minutes (make test runs it for 20 s), and
# its SASL frames / TLS garbage run for 60 s (make test: 6 s); KBROKER_FUZZ_SEED=<seed> replays a
# failed run's frames.
fuzz: test-deps
	KBROKER_FUZZ_SECONDS=$${KBROKER_FUZZ_SECONDS:-600} $(PY) -m pytest -q -s tests/robustness/test_fuzz.py $(PYTEST_ARGS)

# The deterministic simulator (issue 28): SEEDS seeds from FIRST (defaults 1,000 from 1) on SIM_JOBS
# processes, or one seed with its whole trace: `make sim SEED=42` (SIM_ARGS: more kbroker sim options).
SEEDS ?= 1000
FIRST ?= 1
SIM_JOBS ?= 1
sim: $(STAMP)
	$(VENV)/bin/kbroker sim $(if $(SEED),--seed $(SEED) --trace,--seeds $(SEEDS) --first $(FIRST) -j $(SIM_JOBS)) $(SIM_ARGS)

# The load-testing loop: three brokers, 20 s of recorded kafka-python/kcat traffic, replayed x10 on
# Spark (local[*]); the report lands under ./loadgen-demo/<timestamp>/report/.
loadtest: test-deps
	$(VENV)/bin/kbroker loadgen demo

bench: $(TSTAMP)
	$(PY) bench/storage_bench.py

# mypy --strict over the packages listed in pyproject.toml's [tool.mypy].
typecheck: $(TSTAMP)
	$(VENV)/bin/mypy

lint: $(STAMP) typecheck
	$(PIP) install --quiet ruff
	$(VENV)/bin/ruff check --select E,F,W protocol storage broker controller cli bench tests

# ---------------------------------------------------------------------------------------------
# Docker images, built with no image registry: each base is a Debian bookworm root file system
# made with debootstrap and `docker import`ed (deploy/docker/base-image.sh), which unmounts what
# debootstrap left mounted in it and deletes it once imported; steps whose result exists are
# skipped (the base images, the dependency wheels, an unchanged kbroker wheel; docker build's own
# cache for the rest), so a second `make image` takes seconds.
DOCKER_BUILD := DOCKER_BUILDKIT=0 docker build -q
WHEELS       := build/wheels
ROOTFS       := build/docker
SOURCES      := $(shell find protocol storage broker controller loadgen cli -name '*.py' -o -name '*.c' 2>/dev/null) pyproject.toml setup.py

image: image-kbroker image-prometheus image-zookeeper
	@docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep '^kbroker'

# The project's dependencies as wheels (cp311, Debian's python3 in the base is 3.11).
$(WHEELS)/deps/.complete: pyproject.toml | $(STAMP)
	rm -rf $(WHEELS)/deps && mkdir -p $(WHEELS)/deps
	$(PIP) wheel --quiet -w $(WHEELS)/deps .
	rm -f $(WHEELS)/deps/kbroker-*.whl
	touch $@

# kbroker's own wheel, rebuilt when a source file changed.
# After the dependencies' wheels, never beside them (make -j): both run `pip wheel .` in this tree,
# whose build/ and kbroker.egg-info they would share.
$(WHEELS)/kbroker/.complete: $(SOURCES) | $(STAMP) $(WHEELS)/deps/.complete
	rm -rf $(WHEELS)/kbroker && mkdir -p $(WHEELS)/kbroker
	$(PIP) wheel --quiet --no-deps -w $(WHEELS)/kbroker .
	touch $@

image-kbroker: $(WHEELS)/deps/.complete $(WHEELS)/kbroker/.complete
	deploy/docker/base-image.sh kbroker-base:bookworm $(ROOTFS)/rootfs-kbroker python3,python3-venv,netbase
	$(DOCKER_BUILD) --build-arg BASE=kbroker-base:bookworm -t kbroker:latest . >/dev/null

image-prometheus:
	deploy/docker/base-image.sh kbroker-prometheus-base:bookworm $(ROOTFS)/rootfs-prometheus prometheus
	$(DOCKER_BUILD) -t kbroker-prometheus:latest deploy/docker/prometheus >/dev/null

image-zookeeper:
	deploy/docker/base-image.sh kbroker-zookeeper-base:bookworm $(ROOTFS)/rootfs-zookeeper openjdk-17-jre-headless,libzookeeper-java
	$(DOCKER_BUILD) -t kbroker-zookeeper:latest deploy/docker/zookeeper >/dev/null

# build/ (wheels; root file systems while an image is built) goes too: anything mounted below it
# (a debootstrap interrupted before base-image.sh could unmount) is unmounted first, and rm does
# not cross into another file system should that fail.
clean:
	deploy/docker/unmount-below.sh build
	rm -rf --one-file-system build
	rm -rf $(VENV) data .pytest_cache .hypothesis .mypy_cache
