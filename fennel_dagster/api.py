"""The client interface that ``Client`` (HTTP), ``LocalClient`` (the platform in process) and
``MockClient`` (one process) share, ``FennelClient``, and the ``Response`` they answer with.

Code written against ``FennelClient`` runs unchanged on any of them: the same method names,
parameters and return types. What differs is where the work happens: the mock runs the
operators and answers lookups in process; the platform client ships commits to the
definition server, rows to Kafka, and lookups to the engines that own the keys. Both
answer lookups and queries through one implementation (``query.lookup``, ``query.execute``).
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from fennel_dagster.declare.answers import fennel_answer
from fennel_dagster.errors import ClientError, QueryError
from fennel_dagster.ops.pipeline import RowError
from fennel_dagster.ops.schema import BadRow
from fennel_dagster.wire.spec import CommitSpec, DType

DatasetRef = str | type  # a dataset class, or its name
FeatureRef = str | type  # "Featureset.feature", a featureset class (all its features), or a name


class ResponseError(ClientError):
    """A response whose status is an error, raised by ``raise_for_status`` (as requests'
    ``HTTPError``) and by ``Client`` for the query server's 4xx/5xx answers; ``status`` is the
    HTTP status. ``str()`` is the server's message, the very text the same error has on a
    ``LocalClient`` or the ``MockClient``, with its fix in ``hint``."""

    def __init__(self, status: int, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return self.message


class Response(abc.ABC):
    """What every client answers ``commit``, ``log``, ``erase`` and the branch operations
    with: the parts of an HTTP response Fennel's code reads (``status_code``, ``ok``,
    ``json()``, ``text``, ``raise_for_status()``), and the dict keys Fennel 1.5's client
    answers with (``response["status_code"]``, ``["headers"]``, ``["body"]``)."""

    @property
    @abc.abstractmethod
    def status_code(self) -> int: ...

    @abc.abstractmethod
    def json(self) -> dict[str, Any]: ...

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 400

    @property
    def text(self) -> str:
        return json.dumps(self.json(), default=str)

    def raise_for_status(self) -> None:
        if not self.ok:
            raise ResponseError(self.status_code, self.text)

    def __getitem__(self, key: str) -> Any:
        if key == "status_code":
            return self.status_code
        if key == "headers":
            return {"content-type": "application/json"}
        if key == "body":
            return self.json()
        raise KeyError(f"{key!r}: a response has status_code, headers and body")


@dataclass
class LogResult(Response):
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

    def json(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "rejected": [{"dataset": b.dataset, "reason": b.reason} for b in self.rejected],
            "errors": len(self.errors),
        }


@dataclass(frozen=True)
class Unsupported(Response):
    """An HTTP-like answer (``status_code`` 404) to a call the MockClient has no counterpart
    for, as Fennel's mock answers it: e.g. tracking an offline query, which the mock answers
    at once."""

    reason: str
    status_code: int = 404  # type: ignore[assignment]

    def json(self) -> dict[str, Any]:
        return {"error": self.reason}


@dataclass(frozen=True)
class Done(Response):
    """An HTTP-like answer (``status_code`` 200) to a call Fennel's clients answer with an
    HTTP response (commit, erase, the branch operations): what was done, for a commit what
    was committed (``commit``), what the platform reported (``details``, in ``json()``) and
    its own record of it (``outcome``: a ``LocalClient`` commit's ``CommitOutcome``, preview
    diff or Dagster run summary)."""

    message: str
    commit: CommitSpec | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    outcome: object = None
    status_code: int = 200  # type: ignore[assignment]

    def json(self) -> dict[str, Any]:
        return {"message": self.message, **self.details}


class BranchName(str):
    """The current branch's name, an attribute here and a method in Fennel's clients
    (``client.branch()``): a ``str`` that also answers when called."""

    __slots__ = ()

    def __call__(self) -> str:
        return str(self)


@runtime_checkable
class FennelClient(Protocol):
    """The interface of Fennel's ``Client`` that ``MockClient``, ``LocalClient`` and the HTTP
    ``Client`` all implement: the same method names, parameters and return types, and errors
    under ``fennel_dagster.errors.FennelError``. Code typed against it runs on any of them.

    Where Fennel's client answers an HTTP response, ours answer a ``Response``; ``checkout``
    answers nothing a caller relies on (Fennel's: ``None``). ``sleep`` is Fennel's wait for
    the platform to catch up with what was logged."""

    def commit(
        self,
        message: str,
        datasets: Iterable[type] = (),
        featuresets: Iterable[type] = (),
        preview: bool = False,
        incremental: bool = False,
        env: str | None = None,
        backfill: bool = True,
    ) -> Response: ...

    def log(
        self, webhook: str, endpoint: str, df: pd.DataFrame, batch_size: int = 1000
    ) -> LogResult: ...

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

    def query_offline(
        self,
        inputs: list[FeatureRef],
        outputs: list[FeatureRef],
        timestamp_column: str,
        input_dataframe: pd.DataFrame | None = None,
        input_s3: str | None = None,
        output_s3: str | None = None,
        feature_to_column_map: dict[str, str] | None = None,
        workflow: str | None = None,
    ) -> dict[str, Any] | pd.DataFrame: ...

    def track_offline_query(self, request_id: int) -> dict[str, Any] | Response: ...

    def cancel_offline_query(self, request_id: int) -> dict[str, Any] | Response: ...

    def lookup(
        self,
        dataset: DatasetRef,
        keys: pd.DataFrame,
        timestamps: pd.Series | None = None,
        fields: list[str] | None = None,
    ) -> tuple[pd.DataFrame | pd.Series, pd.Series]: ...

    def inspect(self, dataset: DatasetRef, n: int = 10) -> pd.DataFrame: ...

    def get_dataset_df(self, dataset_name: DatasetRef) -> pd.DataFrame: ...

    def erase(self, dataset_name: DatasetRef, erase_keys: pd.DataFrame) -> Response: ...

    def init_branch(self, name: str) -> Response: ...

    def clone_branch(self, name: str, from_branch: str) -> Response: ...

    def delete_branch(self, name: str) -> Response: ...

    def list_branches(self) -> list[str]: ...

    def checkout(self, name: str, init: bool = False) -> object: ...

    def branch(self) -> str: ...

    def sleep(self, seconds: float | None = None) -> object: ...


FeatureClient = FennelClient  # its former name


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
