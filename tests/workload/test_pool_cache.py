"""The record pool's disk cache gives the very texts faker invents, and never fails a run."""

from __future__ import annotations

from loadrepro.workload import corpus


def test_a_cached_pool_is_the_invented_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADREPRO_CACHE", str(tmp_path))
    invented = corpus._invent(5, 64)
    first = corpus.record_pool(5, 64)
    (cached,) = tmp_path.iterdir()
    assert cached.name.startswith(f"pool-5-64-faker{corpus.FAKER_VERSION}-")
    monkeypatch.setattr(corpus, "_invent", lambda *_: (_ for _ in ()).throw(AssertionError("invented again")))
    second = corpus.record_pool(5, 64)
    assert first.texts == second.texts == invented
    assert list(second.chars) == [len(t) for t in invented]


def test_a_damaged_cache_file_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADREPRO_CACHE", str(tmp_path))
    corpus.record_pool(6, 32)
    (cached,) = tmp_path.iterdir()
    cached.write_bytes(b'{"schema": "loadrepro.pool/1", "texts": ["cut')
    assert corpus.record_pool(6, 32).texts == corpus._invent(6, 32)
    assert corpus.record_pool(6, 32).texts == corpus._invent(6, 32)


def test_an_unwritable_cache_still_gives_the_pool(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("LOADREPRO_CACHE", str(blocked / "cache"))
    assert corpus.record_pool(7, 16).texts == corpus._invent(7, 16)
