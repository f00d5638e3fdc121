"""Dagster assets of fennel_dagster: committed feature definitions as software-defined assets."""

import warnings

from dagster._utils.warnings import BetaWarning

# Beta parameters we use knowingly, said once here rather than on every code-server start:
# - `backfill_policy` (assets/offline.py): a date range of an offline table is one Spark run;
# - `owners`: binding resources, Dagster 1.13 re-creates each sensor that targets a job with
#   owners=[] (never None), which trips its own warning; we set no owners on sensors.
for _param in (
    "`backfill_policy` of function `asset`",
    "`owners` of initializer `SensorDefinition",
):
    warnings.filterwarnings("ignore", message=f"Parameter {_param}", category=BetaWarning)
