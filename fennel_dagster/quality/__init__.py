"""Data quality: a dataset's declared expectations, run with great-expectations on samples."""
