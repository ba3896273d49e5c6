"""Fixtures shared by the robustness suites: ``raw``, a bare socket (frames.Raw) to the module's
``broker`` fixture, closed after each test."""

from __future__ import annotations

import pytest

from .frames import Raw


@pytest.fixture
def raw(broker):
    r = Raw(broker.port)
    yield r
    r.close()
