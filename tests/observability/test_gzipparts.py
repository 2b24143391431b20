"""gzip of a body in parts: one gzip member that any reader takes, whatever parts changed between calls."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_devices.observability.gzipparts import GzipParts

_part = st.one_of(
    st.binary(max_size=3000),
    st.text(alphabet='abc{}="_ 0123456789\n', max_size=5000).map(str.encode),  # compressible, like the text format
)


def _single_member(data: bytes) -> bytes:
    """Decompresses exactly one gzip member and requires nothing after it (readers that stop after the first
    member, as some do, then lose nothing)."""
    reader = zlib.decompressobj(wbits=31)
    body = reader.decompress(data) + reader.flush()
    assert reader.eof and reader.unused_data == b""
    return body


@settings(max_examples=60, deadline=None)
@given(bodies=st.lists(st.lists(_part, max_size=6), min_size=1, max_size=5), level=st.sampled_from([1, 6, 9]))
def test_every_body_reads_back_whole_from_one_member(bodies: list[list[bytes]], level: int) -> None:
    compressor = GzipParts(level)  # one compressor across the calls, as a publisher keeps it
    for parts in bodies:
        data = compressor.compress(parts)
        assert _single_member(data) == b"".join(parts)
        assert gzip.decompress(data) == b"".join(parts)


def test_unchanged_parts_are_not_compressed_again() -> None:
    families = [(f"# TYPE f{i} gauge\n" + "".join(f'f{i}{{pod="p{j}"}} {j}\n' for j in range(2000))).encode()
                for i in range(3)]
    compressor = GzipParts()
    first = compressor.compress([*families, b"tail 1\n"])
    kept = list(compressor._kept)
    second = compressor.compress([*families, b"tail 2\n"])
    assert [d for _, d in compressor._kept[:3]] == [d for _, d in kept[:3]]
    assert all(a is b for (_, a), (_, b) in zip(compressor._kept[:3], kept[:3], strict=True))
    assert _single_member(second) == b"".join(families) + b"tail 2\n"
    # Deflating each family on its own costs little: within 1 % of one gzip of the whole.
    assert len(first) <= 1.01 * len(gzip.compress(b"".join([*families, b"tail 1\n"]), compresslevel=1)) + 64
