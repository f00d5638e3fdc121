"""RocksDB options come from typed settings and reach every column family of a hangar (what
RocksDB itself records: its OPTIONS file and LOG), one block cache per database; a state
written under one compression reads back under another; a bad value names its setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.ops.state import WriteBatch
from fennel_dagster.settings import Settings


def _write(hangar: Hangar, namespaces: list[str], n: int) -> None:
    batch = WriteBatch()
    for ns in namespaces:
        for i in range(n):
            batch.put(ns, f"k{i:06d}".encode(), b"v" * 100)
    hangar.apply(batch, offsets={("topic", 0): n})


def _families(options_text: str) -> dict[str, str]:
    """Each column family's section of a RocksDB OPTIONS file (CF options + table options)."""
    out: dict[str, str] = {}
    for header, body in re.findall(r"^\[(.+?)\]\n(.*?)(?=^\[|\Z)", options_text, re.M | re.S):
        m = re.fullmatch(r'(?:CFOptions|TableOptions/BlockBasedTable) "(.+)"', header)
        if m:
            out[m.group(1)] = out.get(m.group(1), "") + body
    return out


def test_settings_reach_every_family_with_one_block_cache(tmp_path: Path) -> None:
    s = Settings(engine_rocksdb_block_cache_mb=8, engine_rocksdb_write_buffer_mb=4,
                 engine_rocksdb_compression="zstd", engine_rocksdb_bloom_bits_per_key=12)  # fmt: skip
    tuning = RocksTuning.of(s)
    assert tuning == RocksTuning(8, 4, "zstd", 12)
    path = tmp_path / "state"
    with Hangar(path, tuning=tuning) as h:
        _write(h, ["a", "b", "c"], 100)
    with Hangar(path, tuning=tuning) as h:  # families that exist are opened with them too
        _write(h, ["a", "d"], 10)
    newest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    families = _families(newest.read_text())
    assert {"default", "a", "b", "c", "d"} <= set(families), sorted(families)
    for name, body in families.items():
        assert "write_buffer_size=4194304" in body, name
        assert "compression=kZSTD" in body, name
        assert "filter_policy=bloomfilter" in body, name
        assert "no_block_cache=false" in body, name
    log = (path / "LOG").read_text()
    caches = re.findall(r"^\s+block_cache: (0x[0-9a-f]+)", log, re.M)  # one per family
    assert len(caches) >= 3 and len(set(caches)) == 1, caches  # the families share it
    assert set(re.findall(r"^\s+capacity : (\d+)", log, re.M)) == {str(8 << 20)}


def test_a_state_written_under_one_compression_reads_under_another(tmp_path: Path) -> None:
    path = tmp_path / "state"
    with Hangar(path, tuning=RocksTuning(compression="lz4")) as h:
        _write(h, ["ns"], 2000)
        h._families["ns"].flush()  # an SST file written with lz4
    with Hangar(path, tuning=RocksTuning(compression="none", block_cache_mb=0)) as h:
        got = list(h.scan("ns", b"k", b"l"))
        assert len(got) == 2000 and got[0] == (b"k000000", b"v" * 100)


def test_an_unknown_compression_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FENNEL_ENGINE_ROCKSDB_COMPRESSION", "gzip")
    with pytest.raises(ValidationError, match="engine_rocksdb_compression"):
        Settings()


def test_a_hangar_opened_without_settings_gets_the_settings_defaults() -> None:
    fields = Settings.model_fields
    assert RocksTuning() == RocksTuning(
        block_cache_mb=fields["engine_rocksdb_block_cache_mb"].default,
        write_buffer_mb=fields["engine_rocksdb_write_buffer_mb"].default,
        compression=fields["engine_rocksdb_compression"].default,
        bloom_bits_per_key=fields["engine_rocksdb_bloom_bits_per_key"].default,
    )


def test_a_follower_opens_table_files_on_one_thread_and_a_writer_on_rocksdbs_default(
    tmp_path: Path,
) -> None:
    """A follower builds a new version at every catch-up, and RocksDB started and joined its
    table-opening threads for each: the option must reach the follower's RocksDB (its LOG,
    in its own directory), and only the follower's."""
    path = tmp_path / "state"
    tuning = RocksTuning(follower_opening_threads=1)
    with Hangar(path, tuning=tuning) as primary:
        _write(primary, ["a", "b"], 10)
        with Hangar.open_secondary(path, tmp_path / "follower", tuning) as follower:
            _write(primary, ["a"], 20)
            follower.catch_up()
            assert follower.get("a", b"k000019") == b"v" * 100
            logs = "".join(p.read_text() for p in (tmp_path / "follower").glob("LOG*"))
    opening = r"^.*Options\.max_file_opening_threads: (\d+)$"
    assert set(re.findall(opening, logs, re.M)) == {"1"}
    assert set(re.findall(opening, (path / "LOG").read_text(), re.M)) == {"16"}
