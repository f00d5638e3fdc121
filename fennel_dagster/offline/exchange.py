"""Offline queries' inputs and outputs on the object store: where they live, how Spark names
them, and the small-frame round trip a client does when it hands over or gets back a
pandas DataFrame (large inputs and outputs stay in S3 and never pass through a client)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fennel_dagster.errors import ClientError
from fennel_dagster.metadata.offline_queries import OfflineQueryRequest
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings

FORMATS = ("parquet", "csv", "json", "delta")


def query_uri(settings: Settings, request: str, name: str) -> str:
    """Where the platform keeps an offline query's ``name`` ("input.parquet", "output")."""
    key = f"{settings.namespace}/offline_queries/{request}/{name}"
    if settings.s3_url is None:
        return str(settings.local_object_dir / settings.s3_bucket / key)
    return f"s3://{settings.s3_bucket}/{key}"


def spark_uri(uri: str) -> str:
    """The path Spark reads and writes ``uri`` at (S3A for ``s3://``)."""
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def write_frame(settings: Settings, uri: str, df: pd.DataFrame) -> None:
    """A pandas frame as one Parquet file at ``uri``."""
    buf = io.BytesIO()
    # Spark reads microseconds (the offline tables' precision too): finer digits are dropped
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf,
                   coerce_timestamps="us", allow_truncated_timestamps=True)  # fmt: skip
    if uri.startswith("s3://"):
        bucket, key = _split(uri)
        s3_client(settings).put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
    else:
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        Path(uri).write_bytes(buf.getvalue())


def read_frame(settings: Settings, uri: str) -> pd.DataFrame:
    """The Parquet files Spark wrote under ``uri``, in part order, as one pandas frame."""
    tables = []
    if uri.startswith("s3://"):
        bucket, key = _split(uri)
        s3 = s3_client(settings)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/")
        keys = sorted(o["Key"] for p in pages for o in p.get("Contents", [])
                      if o["Key"].endswith(".parquet"))  # fmt: skip
        for k in keys:
            body = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
            tables.append(pq.read_table(io.BytesIO(body)))
    else:
        tables = [pq.read_table(p) for p in sorted(Path(uri).glob("*.parquet"))]
    if not tables:
        raise ClientError(f"no Parquet output under {uri}: the query wrote nothing there")
    frame = pa.concat_tables(tables).to_pandas()
    for name in frame.columns:  # Spark writes UTC wall clocks (its session zone) without a zone
        if pd.api.types.is_datetime64_any_dtype(frame[name]) and frame[name].dt.tz is None:
            frame[name] = frame[name].dt.tz_localize("UTC")
    return frame


def prepare_request(
    settings: Settings,
    inputs: Sequence[str],
    outputs: Sequence[str],
    timestamp_column: str,
    input_dataframe: pd.DataFrame | None = None,
    input_s3: str | None = None,
    output_s3: str | None = None,
    feature_to_column_map: Mapping[str, str] | None = None,
    input_format: str = "parquet",
    output_format: str = "parquet",
) -> OfflineQueryRequest:
    """A request for the platform: a DataFrame input is put on the object store first (so the
    query reads it from there like any ``input_s3``); the output goes to ``output_s3`` or the
    platform's own prefix for the request."""
    if (input_dataframe is None) == (input_s3 is None):
        raise ClientError(
            "query_offline needs exactly one input: input_dataframe= (a pandas DataFrame) or "
            "input_s3= (an s3:// path of Parquet, CSV or Delta)"
        )
    if input_format not in FORMATS or output_format not in ("parquet", "delta"):
        raise ClientError(
            f"query_offline formats: input one of {', '.join(FORMATS)}, output parquet or "
            f"delta; got input {input_format!r}, output {output_format!r}"
        )
    name = uuid.uuid4().hex
    if input_dataframe is not None:
        if timestamp_column not in input_dataframe.columns:
            raise ClientError(
                f"input_dataframe has no timestamp column {timestamp_column!r} (its columns: "
                f"{', '.join(map(str, input_dataframe.columns))}); pass timestamp_column= "
                "naming the column of each row's time"
            )
        input_s3, input_format = query_uri(settings, name, "input.parquet"), "parquet"
        write_frame(settings, input_s3, input_dataframe)
    assert input_s3 is not None
    return OfflineQueryRequest(
        inputs=tuple(inputs), outputs=tuple(outputs), timestamp_column=timestamp_column,
        input_uri=input_s3, output_uri=output_s3 or query_uri(settings, name, "output"),
        input_format=input_format, output_format=output_format,
        feature_to_column_map=dict(feature_to_column_map or {}),
    )  # fmt: skip
