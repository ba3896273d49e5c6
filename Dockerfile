# One image for every kbroker role: a broker, a controller, or both (process.roles), configured
# by KBROKER_* environment variables (KBROKER_PROCESS_ROLES=broker, KBROKER_NODE_ID=1, ...).
#
# The project and its dependencies are installed from wheels built beforehand, so the build
# itself needs no network:
#
#     pip wheel -w build/wheels/deps . && mkdir -p build/wheels/kbroker \
#       && mv build/wheels/deps/kbroker-*.whl build/wheels/kbroker/ && docker build -t kbroker .
#
# `make image` does that on a machine without an image registry, from a base image it makes
# with debootstrap (BASE=kbroker-base:bookworm: Debian's python3 3.11, as the wheels expect).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PATH=/opt/kbroker/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KBROKER_LOG_DIRS=/var/lib/kbroker/data

RUN useradd --system --uid 999 --user-group --home-dir /var/lib/kbroker --create-home kbroker \
    && mkdir -p /var/lib/kbroker/data && chown kbroker:kbroker /var/lib/kbroker/data
# `kbroker health` in bash (no Python start): the HEALTHCHECK below.
COPY deploy/docker/healthcheck.sh /usr/local/bin/kbroker-healthcheck

# Dependencies first, in their own layer: a change to kbroker alone reuses it.
COPY build/wheels/deps/ /tmp/wheels/deps/
RUN python3 -m venv /opt/kbroker \
    && /opt/kbroker/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels/deps /tmp/wheels/deps/*.whl \
    && rm -rf /tmp/wheels
COPY build/wheels/kbroker/ /tmp/wheels/kbroker/
RUN /opt/kbroker/bin/pip install --no-cache-dir --no-index --no-deps /tmp/wheels/kbroker/*.whl \
    && rm -rf /tmp/wheels

USER kbroker
WORKDIR /var/lib/kbroker
VOLUME /var/lib/kbroker/data
# 9092: Kafka clients; 9093: a controller's listener; 9404: Prometheus metrics.
EXPOSE 9092 9093 9404
# An ApiVersions round trip to the first listener of $KBROKER_LISTENERS, as `kbroker health` does,
# in bash: ~0.004 CPU-s a check where a Python start is ~0.025 (see deploy/docker/healthcheck.sh).
# A TLS listener first needs `kbroker health -X security.protocol=ssl ...` (docker-compose.secure.yml).
HEALTHCHECK --interval=5s --timeout=6s --start-period=60s --retries=3 CMD ["kbroker-healthcheck"]
ENTRYPOINT ["kbroker"]
CMD ["serve"]
