"""The physical side of assets: each kind's idempotent create and destroy."""

from fennel_dagster.commit.physical.base import AssetStoreError, PhysicalAssets

__all__ = ["AssetStoreError", "PhysicalAssets"]
