"""The packaged pair's registry and the chunk check: a cut or altered chunk is refused with
its name and both sizes or both hashes."""

from __future__ import annotations

import hashlib

import pytest

from stagedspec.models.packaged import PACKAGED, Chunk, check_chunk, packaged


def test_registry_totals_are_the_published_gguf_sizes():
    assert packaged("qwen2.5-coder-1.5b").size == 1_117_320_768 and len(PACKAGED["qwen2.5-coder-1.5b"].chunks) == 22
    assert packaged("qwen2.5-coder-0.5b").size == 491_400_064 and len(PACKAGED["qwen2.5-coder-0.5b"].chunks) == 6
    assert PACKAGED["qwen2.5-coder-0.5b"].chunks[-1].file == "data/part06.bin"
    with pytest.raises(ValueError, match=r"unknown embedded model 'qwen'.*smollm2-135m"):
        packaged("qwen")


def test_cut_or_altered_chunk_is_refused_naming_both(tmp_path):
    data = b"0123456789" * 100
    good = hashlib.sha256(data).hexdigest()
    chunk = Chunk("pkg_part1", "data/part01.bin", len(data), good)
    path = tmp_path / "part01.bin"
    path.write_bytes(data)
    check_chunk(chunk, path)  # intact: accepted
    path.write_bytes(data[:-1])
    with pytest.raises(ValueError, match=r"part01.bin has 999 bytes, expected 1000.*'pkg_part1'"):
        check_chunk(chunk, path)
    altered = b"X" + data[1:]
    path.write_bytes(altered)
    with pytest.raises(
        ValueError, match=rf"sha256 {hashlib.sha256(altered).hexdigest()} differs from the expected {good}"
    ):
        check_chunk(chunk, path)
