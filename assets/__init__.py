"""Dagster assets of fennel_dagster: committed feature definitions as software-defined assets."""

import warnings

from dagster._utils.warnings import BetaWarning

# A beta parameter we never use, said once here rather than on every code-server start:
# binding resources, Dagster 1.13 re-creates each sensor that targets a job with owners=[]
# (never None), which trips its own warning; we set no owners on sensors. (`backfill_policy`,
# which we do use, is silenced where its asset is made: assets/offline.py.)
warnings.filterwarnings(
    "ignore", message="Parameter `owners` of initializer `SensorDefinition", category=BetaWarning
)
