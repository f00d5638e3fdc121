"""The platform's Spark configuration and session: what the batch layer, dagster-pyspark's
resource and the local stack all use."""

from __future__ import annotations

import os
import sys
from typing import Any

from fennel_dagster.settings import Settings


def spark_conf(settings: Settings, app: str = "fennel-dagster") -> dict[str, str]:
    """The Spark configuration of the platform: master, small local defaults, the stack's jars
    and S3A. Also what a ``dagster_pyspark.PySparkResource(spark_config=...)`` takes."""
    conf = {
        "spark.master": settings.spark_master,
        "spark.app.name": app,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        # offline tables are Delta tables (the delta jar is one of the stack's)
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta reads its log with 50 tasks by default, sized for clusters and huge logs
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.ui.showConsoleProgress": "false",
    }
    if settings.spark_master.startswith("local"):
        conf["spark.driver.bindAddress"] = conf["spark.driver.host"] = settings.host  # loopback
        # Python workers (mapInPandas) run this interpreter: it has pandas, pyarrow and us;
        # on a cluster the deployment's PYSPARK_PYTHON names the executors' interpreter
        conf["spark.pyspark.python"] = sys.executable
    jars = sorted(str(p) for p in settings.spark_jars_path.glob("*.jar"))
    if jars:
        # On the driver's own classpath too (not only spark.jars' child loader), so that JDBC's
        # DriverManager and Hadoop's FileSystem loader find the Postgres driver and S3A.
        conf["spark.jars"] = ",".join(jars)
        conf["spark.driver.extraClassPath"] = str(settings.spark_jars_path / "*")
    conf.update({f"spark.hadoop.{k}": v for k, v in s3a_options(settings).items()})
    return conf


def spark_session(settings: Settings, app: str = "fennel-dagster") -> Any:
    """A SparkSession (``local[*]`` by default) configured by :func:`spark_conf`."""
    from pyspark.sql import SparkSession  # pyspark is slow to import: only sessions pay

    os.environ.setdefault("SPARK_LOCAL_IP", settings.host)
    if settings.spark_master.startswith("local"):
        # PySpark starts its Python workers with PYSPARK_PYTHON (default: python3 on PATH)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in spark_conf(settings, app).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def s3a_options(settings: Settings) -> dict[str, str]:
    """Hadoop S3A options for the configured S3 endpoint (``s3a://<bucket>/...`` paths)."""
    if settings.s3_url is None:
        return {}
    return {
        "fs.s3a.endpoint": settings.s3_url,
        "fs.s3a.endpoint.region": settings.s3_region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": str(settings.s3_url.startswith("https")).lower(),
        "fs.s3a.access.key": settings.s3_access_key,
        "fs.s3a.secret.key": settings.s3_secret_key,
        "fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }
