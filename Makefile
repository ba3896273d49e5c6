# kbroker — the two commands of README.md: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test venv test-deps kcat zookeeper prometheus bench soak fuzz clean lint typecheck loadtest

# setup.py builds the one C helper (storage/_record_walk.c, the produce path's record walk) in place.
$(STAMP): pyproject.toml setup.py storage/_record_walk.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

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

test: test-deps typecheck
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

# Long soaks / crash loops (not in CI).
soak: test-deps
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

# The fuzz run of tests/robustness/test_fuzz.py for 10 minutes (make test runs it for 20 s);
# KBROKER_FUZZ_SEED=<seed> replays a failed run's frames.
fuzz: test-deps
	KBROKER_FUZZ_SECONDS=$${KBROKER_FUZZ_SECONDS:-600} $(PY) -m pytest -q -s tests/robustness/test_fuzz.py $(PYTEST_ARGS)

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

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis .mypy_cache
