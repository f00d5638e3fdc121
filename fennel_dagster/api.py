"""The client interface that ``Client`` (the platform) and ``MockClient`` (one process) share.

Code written against ``FeatureClient`` runs unchanged on either: the same method names,
parameters and return types. What differs is where the work happens: the mock runs the
operators and answers lookups in process; the platform client ships commits to the
definition server, rows to Kafka, and lookups to the engines that own the keys. Both
answer lookups and queries through one implementation (``query.lookup``, ``query.execute``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import pandas as pd

from fennel_dagster.declare.answers import fennel_answer
from fennel_dagster.errors import QueryError
from fennel_dagster.ops.pipeline import RowError
from fennel_dagster.ops.schema import BadRow
from fennel_dagster.wire.spec import CommitSpec, DType

DatasetRef = str | type  # a dataset class, or its name
FeatureRef = str | type  # "Featureset.feature", a featureset class (all its features), or a name


@dataclass
class LogResult:
    """What ``log`` did: rows accepted, and the rows rejected on the way in.

    The mock checks rows while logging, so ``rejected``/``errors`` are complete when it
    returns; the platform checks them in the source job, which writes rejects to the
    dataset's error topic, so there both lists are empty and ``accepted`` counts rows sent.
    """

    accepted: int
    rejected: list[BadRow] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)

    @property
    def status_code(self) -> int:
        """Fennel's ``log`` answers an HTTP response: 200 when every row was accepted."""
        return 200 if not self.rejected else 400

    @property
    def ok(self) -> bool:
        return self.status_code == 200

    def json(self) -> dict[str, object]:
        return {
            "accepted": self.accepted,
            "rejected": [{"dataset": b.dataset, "reason": b.reason} for b in self.rejected],
            "errors": len(self.errors),
        }


@dataclass(frozen=True)
class Unsupported:
    """An HTTP-like answer (``status_code`` 404) to a call the MockClient has no counterpart
    for, as Fennel's mock answers it: e.g. tracking an offline query, which the mock answers
    at once."""

    reason: str
    status_code: int = 404
    ok: bool = False

    def json(self) -> dict[str, object]:
        return {"error": self.reason}


@dataclass(frozen=True)
class Done:
    """An HTTP-like answer (``status_code`` 200) to a call Fennel's clients answer with an
    HTTP response (commit, the branch operations), for code that checks it: what was done,
    and for a commit what was committed (``commit``)."""

    message: str
    commit: CommitSpec | None = None
    status_code: int = 200
    ok: bool = True

    def json(self) -> dict[str, object]:
        return {"message": self.message}


class BranchName(str):
    """The current branch's name, an attribute here and a method in Fennel's clients
    (``client.branch()``): a ``str`` that also answers when called."""

    __slots__ = ()

    def __call__(self) -> str:
        return str(self)


@runtime_checkable
class FeatureClient(Protocol):
    def commit(
        self,
        message: str,
        datasets: Iterable[type] = (),
        featuresets: Iterable[type] = (),
        preview: bool = False,
        incremental: bool = False,
        env: str | None = None,
        backfill: bool = True,
    ) -> object: ...

    def log(self, webhook: str, endpoint: str, df: pd.DataFrame, /) -> LogResult: ...

    def lookup(
        self,
        dataset: DatasetRef,
        keys: pd.DataFrame,
        timestamps: pd.Series | None = None,
        fields: list[str] | None = None,
    ) -> tuple[pd.DataFrame | pd.Series, pd.Series]: ...

    def query(
        self,
        inputs: list[FeatureRef],
        outputs: list[FeatureRef],
        input_df: pd.DataFrame | None = None,
        timestamps: pd.Series | None = None,
        *,
        input_dataframe: pd.DataFrame | None = None,
        log: bool = False,
        workflow: str | None = None,
        sampling_rate: float | None = None,
    ) -> pd.DataFrame: ...


def answer_shape(
    data: pd.DataFrame,
    found: pd.Series,
    fields: list[str] | None,
    types: Mapping[str, DType] | None = None,
) -> tuple[pd.DataFrame | pd.Series, pd.Series]:
    """A client lookup's answer as Fennel's clients give it: one field asked, its column (a
    Series named for it); otherwise the rows. Struct values (``types``: each column's) are
    objects of their struct class, missing values ``pd.NA`` in nullable dtypes, as Fennel's
    lookups give them."""
    if types:
        data = fennel_answer(data, types)
    if fields is not None and len(fields) == 1:
        return data[fields[0]].rename(fields[0]), found
    return data, found


def dataset_name(dataset: DatasetRef) -> str:
    return str(getattr(dataset, "__fennel_dataset_name__", dataset))


def feature_name(x: FeatureRef) -> str:
    if isinstance(x, str):
        return x
    return str(getattr(x, "__fennel_featureset_name__", None) or x)


def now_for(keys: pd.DataFrame, timestamps: pd.Series | None) -> pd.Series:
    """Lookup timestamps: the given ones (as UTC), or now for every key."""
    if timestamps is None:
        return pd.Series([pd.Timestamp.now(tz="UTC")] * len(keys))
    return pd.to_datetime(pd.Series(timestamps), utc=True).reset_index(drop=True)


def input_frame(
    input_df: pd.DataFrame | None, input_dataframe: pd.DataFrame | None
) -> pd.DataFrame:
    """The query's input rows, given positionally or as Fennel's ``input_dataframe=``."""
    if (input_df is None) == (input_dataframe is None):
        raise QueryError("query needs its input rows once: pass input_dataframe=<DataFrame>")
    return input_df if input_df is not None else input_dataframe  # type: ignore[return-value]


class MissingInputColumns(QueryError, ValueError):
    """A query whose input rows lack a column of one of its input features."""


def check_input_columns(inputs: Iterable[str], columns: Iterable[object]) -> None:
    """Every input feature has its column in the input rows (checked first, as Fennel
    does, in Fennel's words; the fix in ``hint``)."""
    have = list(columns)
    wanted = list(inputs)
    missing = [i for i in wanted if "." in i and i not in {str(c) for c in have}]
    if missing:
        raise MissingInputColumns(
            "Input dataframe does not contain all the required features. "
            f"Required features: {wanted}. Input dataframe columns: {pd.Index(have)}",
            hint=f"add the column(s) {', '.join(missing)} to the input rows, one per input "
            "feature, named Featureset.feature",
        )


def refuse_feature_log(log: bool, workflow: str | None, sampling_rate: float | None) -> None:
    """Fennel's ``query(log=True, workflow=, sampling_rate=)`` logs the computed features;
    neither client does that yet, so asking for it is an error, not a silent no-op."""
    if log or workflow is not None or sampling_rate is not None:
        raise QueryError(
            "query(log=True, workflow=..., sampling_rate=...) logs features, which this "
            "platform does not do yet: drop those arguments"
        )
