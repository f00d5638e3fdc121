"""Operators: one implementation of every pipeline operator, on pandas batches."""
