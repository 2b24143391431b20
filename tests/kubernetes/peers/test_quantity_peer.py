"""``hami_devices.kubernetes.quantity`` against ``resource.Quantity`` itself: on every value of a corpus, the
same error or the same exact value, for values read as the API server reads a JSON field."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes import quantity as q
from tests.kubernetes.peers.conftest import Peer

EDGES: list[Any] = [
    "4k", "16Ki", "1e3", "1E3", "500m", "4000", "16000", "4Ki", "8Gi", "1.5Gi", "0.5Gi", "100m", "-1", "-4k",
    "+5", "0", "00", "-0", "0.0", ".5", "5.", ".", "-", "+", "-.", "Ki", "m", "e3", "e-10", "0e-10", "1e", "E",
    "1E", "1EE", "1Ei", "8Ei", "9Ei", "9223372036854775807", "9223372036854775808", "9223372036854775807Ki",
    "12345678901234567890", "1234567890123456789012345678901234567890", "0.1n", "-0.1n", "1n", "1u", "1.5n",
    "0.0000000001", "1e-9", "1e-10", "1e-2147483649", "1.5e-2147483648", "1e2147483647",
    "1e9223372036854775807", "1e9223372036854775808", "1.5e2000000000", "1ee3", "1e3m", "1m3", "1Ki5", "1KI",
    "1 k", " 1k", "1k ", "\t4k\n", "1.2.3", "--1", "+-1", "1+", "1e+3", "1e+", "0x10", "1_000", "\uff11", "1k1",
    "1.Ki", "1.0Ki", ".5Ki", "0.5Mi", "3.14159265358979323846Ki", "1.000000000001Ki", "123456789012345Ki",
    "1234567890123456Ki", "1M", "1G", "1T", "1P", "7.5E", "1Pi", "1Ti", "2Ti", "1e18", "1e19", "999999999999999999e1",
    "1.999999999999999999", "0.000000000999", "-0.000000000999", "1u5", "5i", "1Mi1", "", "   ",
    4000, 0, -7, 16384, 10**20, 2**63, 1.5, 0.1, 1e20, 1e-12, -2.5, 4000.0,
]
ALPHABET = "0123456789" * 3 + ".+-eEinumkKMGTPi"
SUFFIXES = ["", "", "", "m", "k", "M", "G", "T", "P", "E", "n", "u", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def corpus(seed: int = 24, size: int = 3000) -> list[Any]:
    """Edge cases, then well-formed quantities of every shape, then strings drawn from the grammar's alphabet."""
    rng = random.Random(seed)
    out: list[Any] = list(EDGES)
    for _ in range(size // 2):
        whole = "".join(rng.choice("0123456789") for _ in range(rng.choice([0, 1, 1, 2, 4, 8, 16, 19, 25])))
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.choice([0, 0, 1, 3, 9, 12])))
        number = rng.choice(["", "", "+", "-"]) + whole + (("." + fraction) if rng.random() < 0.4 else "")
        if rng.random() < 0.25:
            suffix = rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 40))
        else:
            suffix = rng.choice(SUFFIXES)
        out.append(number + suffix)
    for _ in range(size // 2):
        out.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))))
    out.extend(rng.randint(-(10**12), 10**12) for _ in range(50))
    out.extend(rng.uniform(-1e6, 1e6) for _ in range(50))
    return out


def ours(value: Any) -> Decimal | None:
    try:
        return q.parse(value)
    except InvalidRequest:
        return None


def test_every_value_reads_as_kubernetes_reads_it(peer: Peer) -> None:
    values = corpus()
    answers = peer.run("quantity", {"values": values})["results"]
    assert len(answers) == len(values)
    wrong = []
    for value, answer in zip(values, answers, strict=True):
        mine = ours(value)
        theirs = None if answer["error"] else Decimal(answer["exact"])
        if (mine is None) != (theirs is None) or (mine is not None and mine != theirs):
            wrong.append((value, str(mine), answer))
    assert not wrong, f"{len(wrong)} of {len(values)} differ, e.g. {json.dumps(wrong[:10], default=str)}"
    errors = sum(1 for a in answers if a["error"])
    assert 0.2 < errors / len(values) < 0.8  # the corpus exercises both sides


def test_the_go_client_writes_4000_as_4k(peer: Peer) -> None:
    """Why the extender must read suffixes as counts: what a Go client sends for ``MustParse("4000")``."""
    answer = peer.run("quantity", {"values": ["4000", "16000", "15360", "4096"]})["results"]
    assert [a["canonical"] for a in answer] == ["4k", "16k", "15360", "4096"]
    assert [q.count(a["canonical"]) for a in answer] == [4000, 16000, 15360, 4096]
