"""The read path: physical query plans over extractors, and their execution on batches."""
