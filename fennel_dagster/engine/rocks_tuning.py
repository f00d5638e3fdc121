"""RocksDB options of a job partition's state, from typed settings (``engine_rocksdb_*``).

One block cache per database, shared by its column families (a hangar's namespaces), so a
partition's read cache has one size whatever its number of operators. Bloom filters serve
the point reads of lookups and joins; range scans (windows, tiles) read through the cache.
Compression applies to new files only: a database written under another keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options

from fennel_dagster.settings import RocksCompression, Settings

_COMPRESSION = {
    "none": DBCompressionType.none,
    "snappy": DBCompressionType.snappy,
    "lz4": DBCompressionType.lz4,
    "zstd": DBCompressionType.zstd,
}
MB = 1 << 20


@dataclass(frozen=True)
class RocksTuning:
    # RocksDB's own defaults, except that the cache is the database's, not each family's
    block_cache_mb: int = 32
    write_buffer_mb: int = 64
    compression: RocksCompression = "snappy"
    bloom_bits_per_key: int = 0  # 0: no filter (windows range-scan; lookups would use one)
    # A follower builds a new version of each family at every catch-up, and RocksDB starts
    # and joins this many threads to open the version's table files (its default: 16). That
    # was most of a catch-up's cost after a small batch: 8.9 ms CPU with a dozen families, not
    # 0.18 ms (bench/results/follower.md). A writer builds versions only at flushes and
    # compactions.
    follower_opening_threads: int = 1

    @classmethod
    def of(cls, settings: Settings) -> RocksTuning:
        return cls(
            block_cache_mb=settings.engine_rocksdb_block_cache_mb,
            write_buffer_mb=settings.engine_rocksdb_write_buffer_mb,
            compression=settings.engine_rocksdb_compression,
            bloom_bits_per_key=settings.engine_rocksdb_bloom_bits_per_key,
        )

    def cache(self) -> Cache:
        """The database's block cache, to share among its families' options."""
        return Cache(self.block_cache_mb * MB)

    def family(self, cache: Cache, in_place: bool = False, follower: bool = False) -> Options:
        """Options of one column family (``Options`` for the database's default family too);
        ``in_place``: a rewritten family (``ops.state.rewritten_in_place``) of a writer, whose
        memtable then keeps one version of an entry, not one per batch that wrote it. Readers
        (a secondary) never set it: RocksDB's iterators do not lock an entry updated in place.
        ``follower``: the options of a secondary (a lookup endpoint's follower)."""
        opts = Options(raw_mode=True)
        if follower:
            opts.set_max_file_opening_threads(self.follower_opening_threads)
        # one thread writes a partition's state, a batch at a time: concurrent memtable
        # writes gain nothing there, and in-place updates require them off (a database option)
        opts.set_allow_concurrent_memtable_write(False)
        if in_place:
            opts.set_inplace_update_support(True)
        table = BlockBasedOptions()
        if self.block_cache_mb > 0:
            table.set_block_cache(cache)
        else:
            table.disable_cache()
        if self.bloom_bits_per_key > 0:
            table.set_bloom_filter(self.bloom_bits_per_key, False)
        opts.set_block_based_table_factory(table)
        opts.set_write_buffer_size(self.write_buffer_mb * MB)
        opts.set_compression_type(_COMPRESSION[self.compression]())
        return opts
