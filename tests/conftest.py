"""Shared test configuration: the anyio backend and the hypothesis profiles."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "deep", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def anyio_backend() -> str:
    """grpclib runs on asyncio, so every async test does too."""
    return "asyncio"


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test a compiled build older than the sources: Python would load the old
    compiled modules instead of the code under test."""
    from tests.compiled_build import stale_sources

    stale = stale_sources()
    if stale:
        pytest.exit(
            f"the compiled modules are older than {stale[0]} (and {len(stale) - 1} more "
            "sources): run `make compiled`, or `make pure` to test the sources alone",
            returncode=2,
        )
