"""The tests' own helpers that decide what a test waits for: the host's speed as a factor on its waits."""

from __future__ import annotations

from tests.helpers import SPEED_REFERENCE_S, WAIT_FACTOR_MOST, host_slowness, scaled, wait_factor


def test_waits_scale_with_the_hosts_speed_between_as_written_and_the_most():
    assert wait_factor(SPEED_REFERENCE_S / 3) == 1.0  # a faster host keeps the waits as written
    assert wait_factor(SPEED_REFERENCE_S) == 1.0
    assert wait_factor(2.5 * SPEED_REFERENCE_S) == 2.5
    assert wait_factor(100 * SPEED_REFERENCE_S) == WAIT_FACTOR_MOST
    assert wait_factor(0.3, reference=0.1, most=2.0) == 2.0
    factor = host_slowness()
    assert 1.0 <= factor <= WAIT_FACTOR_MOST and host_slowness() == factor  # measured once
    assert scaled(60_000) == int(60_000 * factor)
