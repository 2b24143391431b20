"""Placements must not change when the engine is optimised: replay a seeded stream against a golden file.

The golden file was recorded by ``placement_stream.py`` before the engine's
hot path was reworked for speed; every policy must still choose the same
node, devices, memory/cores/partitions and exact scores, rank the same top 5
and reject with the same reasons.
"""

from __future__ import annotations

import json

import pytest

from tests.scheduling.placement_stream import GOLDEN, POLICIES, record


@pytest.mark.parametrize("policy", POLICIES)
def test_placements_match_golden(policy: str) -> None:
    expected = json.loads(GOLDEN.read_text())[policy]
    got = json.loads(json.dumps(record(policy)))
    assert len(got) == len(expected)
    for want, have in zip(expected, got, strict=True):
        assert have == want, f"decision {want['i']} differs"
