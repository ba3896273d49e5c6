"""tests/deploy: docker-compose.yml started with the Docker engine (marker ``docker``).

They run whenever ``docker info`` answers (``make test`` builds the images first with ``make
image``, cached on the machine) and are skipped, saying why, when it does not or when the
images are missing.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.deploy.compose import IMAGES, docker_answers

_why_not: list[str | None] = []


def _skip_reason() -> str | None:
    if not _why_not:
        reason = docker_answers()
        if reason is None:
            missing = [i for i in IMAGES
                       if subprocess.run(["docker", "image", "inspect", i], capture_output=True).returncode != 0]
            if missing:
                reason = f"images {missing} not built: run `make image` (make test does)"
        _why_not.append(reason)
    return _why_not[0]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/deploy/" in str(item.fspath):
            item.add_marker(pytest.mark.docker)


def pytest_runtest_setup(item):
    if item.get_closest_marker("docker") is not None:
        reason = _skip_reason()
        if reason is not None:
            pytest.skip(f"Docker tests skipped: {reason}")
