"""A run's workload file: written plain, packed with zstd once the verdict is out, read in any of its three forms,
and shipped gzipped in a bundle (replay.py reads it with the standard library)."""

import gzip
import zipfile

from loadrepro.report.bundle import _ship_gzipped
from loadrepro.workload.export import (
    BUNDLED_WORKLOAD_FILE,
    PLAIN_WORKLOAD_FILE,
    WORKLOAD_FILE,
    compress_workload,
    open_workload,
    open_workload_bytes,
    workload_file,
)

# Long and repetitive, as a prefix-shared workload is: every line repeats the last one's history and adds to it.
LINES = [f'{{"type": "request", "turn": {i}, "body": "{"shared history " * 400}{"turn " * i}"}}\n' for i in range(300)]
PLAIN = "".join(LINES).encode()


def test_the_plain_file_is_packed_whole_and_read_back_as_it_was(tmp_path):
    plain = tmp_path / PLAIN_WORKLOAD_FILE
    plain.write_bytes(PLAIN)
    packed = compress_workload(plain)
    assert packed == tmp_path / WORKLOAD_FILE and not plain.exists() and not list(tmp_path.glob("*.partial"))
    assert packed.stat().st_size < len(PLAIN) / 50  # the repeats are found across lines
    assert workload_file(tmp_path) == packed
    with open_workload(packed) as lines:
        assert list(lines) == LINES
    with open_workload_bytes(packed) as raw:
        assert raw.read() == PLAIN


def test_each_form_is_found_and_read_the_same(tmp_path):
    assert workload_file(tmp_path) is None
    (tmp_path / BUNDLED_WORKLOAD_FILE).write_bytes(gzip.compress(PLAIN))  # an older run's
    assert workload_file(tmp_path) == tmp_path / BUNDLED_WORKLOAD_FILE
    (tmp_path / PLAIN_WORKLOAD_FILE).write_bytes(PLAIN)  # a run killed before it packed its file
    assert workload_file(tmp_path) == tmp_path / PLAIN_WORKLOAD_FILE
    for path in (tmp_path / BUNDLED_WORKLOAD_FILE, tmp_path / PLAIN_WORKLOAD_FILE):
        with open_workload(path) as lines:
            assert list(lines) == LINES


def test_a_bundle_ships_every_form_gzipped_and_an_older_gzip_as_it_is(tmp_path):
    plain = tmp_path / PLAIN_WORKLOAD_FILE
    plain.write_bytes(PLAIN)
    old = tmp_path / BUNDLED_WORKLOAD_FILE
    old.write_bytes(gzip.compress(PLAIN, mtime=0))
    forms = {"plain": plain, "gz": old}
    packed_dir = tmp_path / "packed"
    packed_dir.mkdir()
    (packed_dir / PLAIN_WORKLOAD_FILE).write_bytes(PLAIN)
    forms["zst"] = compress_workload(packed_dir / PLAIN_WORKLOAD_FILE)
    with zipfile.ZipFile(tmp_path / "bundle.zip", "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, path in forms.items():
            _ship_gzipped(path, bundle, f"{name}/{BUNDLED_WORKLOAD_FILE}")
    with zipfile.ZipFile(tmp_path / "bundle.zip") as bundle:
        for name in forms:
            entry = bundle.getinfo(f"{name}/{BUNDLED_WORKLOAD_FILE}")
            assert entry.compress_type == zipfile.ZIP_STORED  # gzip already: not deflated twice
            assert gzip.decompress(bundle.read(entry)) == PLAIN
        assert bundle.read(f"gz/{BUNDLED_WORKLOAD_FILE}") == old.read_bytes()
