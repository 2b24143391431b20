"""The built-in policies' scores written from their documentation, over the oracle's placements.

* binpack / spread (``scorers/fit.py``): a device's *fullness* once the part
  lands is the mean of its memory fraction (over the memory that may be
  granted) and its core fraction (of 100), clipped to 0..1; binpack scores
  ``100 x fullness``, spread ``100 x (1 - fullness)``.  A set scores the mean of
  its devices; a request the device-count weighted mean of its parts, which is
  the mean over all its grants.
* The built-in ``binpack`` and ``spread`` policies add trait-affinity, topology
  and locality.  For a *batch* task trait-affinity is half "cheap cards" (every
  card here costs the same) and half "cards already in use" (the fullness
  after), topology scores 100 for one device and the mean pair score of a set
  (no pair scores here: the same for every set of one size), and locality is
  100 without labels: each policy's total is an increasing (binpack) or
  decreasing (spread) function of the mean fullness.
* bestfit (``scorers/bestfit.py``, the FGD paper's simulator): a node's
  ``left`` is half its free CPU after the task over the largest node's CPU plus
  half its free device share after the task over the largest node's device
  count; the node whose ``int(100 x (1 - left))`` is highest wins, ties to the
  device left with the least free share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from tests.oracles.placement_rules import Share, World
from tests.oracles.worlds import capacity, free_milli

FULLNESS_POLICIES = {"binpack": 1, "only-binpack": 1, "spread": -1, "only-spread": -1}
"""Policies whose choice maximises (+1) or minimises (-1) the mean fullness after."""


def fullness_after(world: World, uuid: str, share: Share) -> Fraction:
    dev = world.device(uuid)
    held = world.usage(uuid)
    memory = Fraction(held.memory_mib + share.memory_mib, capacity(world, dev))
    cores = Fraction(held.cores + share.cores, 100)
    return min(Fraction(1), max(Fraction(0), (memory + cores) / 2))


def mean_fullness(world: World, grants: Sequence[tuple[int, str, Share]]) -> Fraction:
    if not grants:
        return Fraction(0)
    return sum((fullness_after(world, uuid, share) for _, uuid, share in grants), Fraction(0)) / len(grants)


def share_milli(world: World, uuid: str, share: Share) -> int:
    """The thousandths of the device the grant takes: the scarcer of its memory and its cores."""
    dev = world.device(uuid)
    taken = max(Fraction(share.memory_mib, capacity(world, dev)), Fraction(share.cores, 100))
    return min(1000, max(1, math.ceil(taken * 1000)))


def bestfit_value(world: World, request: Any, node: str, uuid: str, share: Share) -> Fraction:
    """``100 x (1 - left)`` of placing the single-device request on ``uuid`` of ``node`` (exact)."""
    max_cpu = max(max(h.cpu_total for h in world.hosts), 1)
    max_gpu = max(max(len(world.on(h.name)) for h in world.hosts) * 1000, 1)
    host = world.host(node)
    free = sum(free_milli(world, d) for d in world.on(node))
    left = Fraction(host.cpu_free - request.host_cpu_milli, 2 * max_cpu) + Fraction(
        free - share_milli(world, uuid, share), 2 * max_gpu
    )
    return 100 * (1 - left)


def leftover(world: World, uuid: str, share: Share) -> int:
    """The free share the device is left with (bestfit's tie-break: least first)."""
    return free_milli(world, world.device(uuid)) - share_milli(world, uuid, share)


def bestfit_problems(
    world: World, request: Any, chosen: tuple[str, str, Share], options: Sequence[tuple[str, str, Share]]
) -> list[str]:
    """Why the chosen single-device placement is not a bestfit argmax (empty: it is one).

    The engine scores ``int(...)`` in floating point: a value within 1e-9 of an integer may land in the
    bucket below, so buckets are compared with that slack and the tie-break is judged only where the
    chosen bucket is unambiguous.
    """
    values = {(n, u): bestfit_value(world, request, n, u, s) for n, u, s in options}
    best = max(values.values())
    node, uuid, share = chosen
    mine = values[(node, uuid)]
    if math.floor(mine + Fraction(1, 10**9)) < math.floor(best - Fraction(1, 10**9)):
        return [f"bestfit: chose {uuid} at {float(mine):.4f}, best is {float(best):.4f}"]
    bucket = math.floor(mine)
    near = [abs(v - round(v)) < Fraction(1, 10**9) for v in (mine, best)]
    if any(near) or math.floor(best) != bucket:
        return []
    tied = [(n, u, s) for n, u, s in options if math.floor(values[(n, u)]) == bucket]
    least = min(leftover(world, u, s) for _, u, s in tied)
    if leftover(world, uuid, share) != least:
        return [f"bestfit: {uuid} leaves {leftover(world, uuid, share)} of a device free, {least} was possible"]
    return []
