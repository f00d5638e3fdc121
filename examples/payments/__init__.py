"""A realistic example feature repo: card payments (transactions, users, merchants)."""

from examples.payments.datasets import DATASETS
from examples.payments.featuresets import FEATURESETS

__all__ = ["DATASETS", "FEATURESETS"]
