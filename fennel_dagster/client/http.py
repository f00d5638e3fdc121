"""``Client``: the platform over HTTP, as Fennel's ``Client(url, token, branch=)``.

Everything goes to a query server (``fennel-dagster serve``): commits as wire bytes, queries,
lookups and logged rows as JSON. The user process holds a URL and a token, never a database
DSN or an engine address. Answers come back typed by the declared features and fields.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import httpx
import pandas as pd

from fennel_dagster.api import (
    DatasetRef,
    Done,
    FeatureRef,
    LogResult,
    ResponseError,
    answer_shape,
    check_input_columns,
    dataset_name,
    feature_name,
    input_frame,
    refuse_feature_log,
)
from fennel_dagster.client.offline import wait_until_finished
from fennel_dagster.commit.errors import (
    BackfillRefused,
    BranchExistsError,
    BranchNotFoundError,
    BranchNotSynced,
    CommitRejected,
    MainBranchDeletion,
    Violation,
)
from fennel_dagster.declare import commit_spec
from fennel_dagster.declare.answers import answer_value, fennel_answer, holds_struct, struct_objects
from fennel_dagster.declare.lookup import serve_outside_runs
from fennel_dagster.engine.barrier import BarrierTimeout, sleep_timeout
from fennel_dagster.engine.lookup_client import EngineUnavailable
from fennel_dagster.errors import ClientError, FennelError
from fennel_dagster.ops.rows import json_column, typed_series
from fennel_dagster.query.lookup import DatasetNotFound
from fennel_dagster.wire import codec, encode, spec

BRANCH_HEADER = "X-FENNEL-BRANCH"


ServerError = ResponseError  # the query server refused or failed a request (``status``)


# errors the query server answers by class name, which the client raises as the same class
_SAME_CLASS: dict[str, type[FennelError]] = {
    c.__name__: c
    for c in (CommitRejected, BackfillRefused, BranchExistsError, BranchNotFoundError,
              BranchNotSynced, MainBranchDeletion, DatasetNotFound)
}  # fmt: skip
_AS_SERVER_ERROR: dict[type[FennelError], type[ServerError]] = {}


def server_error(status: int, body: dict[str, Any], reason: str) -> ServerError:
    """The exception for an error answer: the server's class (a ``ServerError`` too), text
    and hint, and a rejected commit's violations."""
    message = str(body.get("error", reason))
    hint = body.get("hint")
    cls = _SAME_CLASS.get(str(body.get("kind")))
    if cls is None:
        return ServerError(status, message, hint)
    both = _AS_SERVER_ERROR.get(cls)
    if both is None:
        both = type(cls.__name__, (cls, ServerError), {"__str__": ServerError.__str__,
                                                       "__module__": __name__})  # fmt: skip
        _AS_SERVER_ERROR[cls] = both
    err = both.__new__(both)
    ServerError.__init__(err, status, message, hint)
    if isinstance(err, CommitRejected):
        err.errors = [Violation(**v) for v in body.get("violations", [])]
    return err


class Client:
    def __init__(
        self, url: str, token: str | None = None, branch: str | None = None, timeout: float = 60.0
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self._branch = branch or "main"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- transport

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        headers = {BRANCH_HEADER: kw.pop("branch", None) or self._branch}
        while True:
            try:
                resp = self.http.request(method, path, headers=headers, **kw)
            except httpx.HTTPError as e:
                raise ClientError(f"query server at {self.url} unreachable: {e}") from e
            body = resp.json() if resp.content else {}
            if resp.status_code != 503 or not self._retry_starting():
                break
        if resp.status_code == 503:
            raise EngineUnavailable(body.get("error", "an engine partition is unavailable"))
        if resp.status_code >= 400:
            raise server_error(resp.status_code, body, resp.reason_phrase)
        return body

    # ---------------------------------------------------------------- commit and branches

    def commit(
        self,
        message: str,
        datasets: Iterable[type] = (),
        featuresets: Iterable[type] = (),
        preview: bool = False,
        incremental: bool = False,
        env: str | None = None,
        backfill: bool = True,
        ready_timeout: float = 60.0,
    ) -> Done:
        """Ship a commit to the server; the answer's ``json()`` is the server's report
        (``commit_id``; a preview's ``summary`` lines, also printed). ``ready_timeout``:
        seconds the server waits for engines to serve the branch's partitions; ``json()``'s
        ``ready`` says whether they do, ``starting`` lists those that do not yet (lookups
        meeting 503 on them are retried until the deadline). After a commit,
        ``Dataset.lookup`` outside an extractor (in a test) is answered through this client,
        as by the mock that committed."""
        request = commit_spec(message, datasets, featuresets, env=env, incremental=incremental)
        params = {"preview": str(preview).lower(), "backfill": str(backfill).lower(),
                  "ready_timeout": str(0 if preview else ready_timeout)}  # fmt: skip
        result: dict[str, Any] = self._call(
            "POST", "/api/v1/commit", content=encode(request), params=params,
            timeout=self.http.timeout.read + ready_timeout if self.http.timeout.read else None,
        )  # fmt: skip
        self._note_starting(result)
        for line in result.get("summary", []):
            print(line)
        if preview:
            return Done(f"preview of {message!r}: valid", request, result)
        serve_outside_runs(self._dataset_lookup)
        return Done(f"committed {message!r}", request, result)

    def init_branch(self, name: str) -> Done:
        self._call("POST", "/api/v1/init", json={}, branch=name)
        self._branch = name
        return Done(f"created branch {name!r}")

    def clone_branch(
        self, name: str, from_branch: str | None = None, from_name: str | None = None
    ) -> Done:
        """Clone ``from_branch`` (or ``from_name``, as Fennel's reference page names it)."""
        source = from_branch or from_name or self._branch
        self._call("POST", "/api/v1/init", json={"clone_from": source}, branch=name)
        self._branch = name
        return Done(f"cloned branch {source!r} into {name!r}")

    def delete_branch(self, name: str) -> Done:
        self._call("POST", "/api/v1/delete", json={}, branch=name)
        if self._branch == name:
            self._branch = "main"
        return Done(f"deleted branch {name!r}")

    def list_branches(self) -> list[str]:
        return [b["name"] for b in self._call("GET", "/api/v1/branch/list")["branches"]]

    def checkout(self, name: str, init: bool = False) -> None:
        if init and name not in self.list_branches():
            self.init_branch(name)
        self._branch = name

    def branch(self) -> str:
        return self._branch

    # ---------------------------------------------------------------- read path

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
    ) -> pd.DataFrame:
        refuse_feature_log(log, workflow, sampling_rate)
        df = input_frame(input_df, input_dataframe)
        names = [feature_name(i) for i in inputs]
        check_input_columns(names, df.columns)
        body: dict[str, Any] = {
            "inputs": names, "outputs": [feature_name(o) for o in outputs],
            "data": {n: json_column(df[n]) for n in names},
        }  # fmt: skip
        if timestamps is not None:
            body["timestamps"] = json_column(pd.to_datetime(pd.Series(timestamps), utc=True))
        reply = self._call("POST", "/api/v1/query", json=body, params={"typed": "true"})
        # as the mock's query answers: nullable dtypes, struct values as objects (``_typed``)
        # and a missing one None
        types = {c: t for c, t in ((c, codec.from_jsonable(j)) for c, j in reply["types"].items())
                 if not holds_struct(t)}  # fmt: skip
        return fennel_answer(_typed(reply["data"], reply["types"]), types)

    def explain(self, inputs: list[FeatureRef], outputs: list[FeatureRef]) -> dict[str, Any]:
        body = {"inputs": [feature_name(i) for i in inputs],
                "outputs": [feature_name(o) for o in outputs]}  # fmt: skip
        result: dict[str, Any] = self._call("POST", "/api/v1/explain", json=body)
        return result

    def lookup(
        self,
        dataset: DatasetRef,
        keys: pd.DataFrame,
        timestamps: pd.Series | None = None,
        fields: list[str] | None = None,
    ) -> tuple[pd.DataFrame | pd.Series, pd.Series]:
        data, found, types = self._lookup(dataset_name(dataset), keys, timestamps, fields)
        return answer_shape(data, found, fields, types)

    def _dataset_lookup(
        self, name: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        """``Dataset.lookup`` called outside an extractor (a test's), on this client's
        branch: the rows (struct values as objects, as extractors get them) and found."""
        data, found, types = self._lookup(name, keys, ts, fields)
        fields_ = [spec.FieldSpec(c, t) for c, t in types.items()]
        return struct_objects(data, fields_), found

    def _lookup(
        self,
        name: str,
        keys: pd.DataFrame,
        timestamps: pd.Series | None,
        fields: list[str] | None,
    ) -> tuple[pd.DataFrame, pd.Series, dict[str, Any]]:
        keys = pd.DataFrame(keys).reset_index(drop=True)
        body: dict[str, Any] = {"keys": {c: json_column(keys[c]) for c in keys.columns},
                                "fields": fields or []}  # fmt: skip
        if timestamps is not None:
            body["timestamps"] = json_column(pd.to_datetime(pd.Series(timestamps), utc=True))
        reply = self._call("POST", f"/api/v1/dataset/{name}/lookup", json=body,
                           params={"typed": "true"})  # fmt: skip
        types = {c: codec.from_jsonable(t) for c, t in reply["types"].items()}
        return _typed(reply["data"], reply["types"]), pd.Series(reply["found"], dtype=bool), types

    def inspect(self, dataset: DatasetRef, n: int = 10) -> pd.DataFrame:
        """The ``n`` newest rows of a dataset (by its timestamp)."""
        reply = self._call("GET", f"/api/v1/dataset/{dataset_name(dataset)}/inspect",
                           params={"n": n})  # fmt: skip
        return _typed(reply["data"], reply["types"])

    def get_dataset_df(self, dataset_name: DatasetRef) -> pd.DataFrame:
        """Every row of a dataset, ordered by its timestamp."""
        reply = self._call("GET", f"/api/v1/dataset/{_name_of(dataset_name)}/rows")
        return _typed(reply["data"], reply["types"])

    def erase(self, dataset_name: DatasetRef, erase_keys: pd.DataFrame) -> Done:
        """Fennel's ``erase`` of the rows of ``erase_keys`` (refused by the platform, which
        does not erase yet: the server says so)."""
        name = _name_of(dataset_name)
        keys = {str(c): json_column(erase_keys[c]) for c in erase_keys.columns}
        reply = self._call("POST", f"/api/v1/dataset/{name}/erase", json={"erase_keys": keys})
        return Done(f"erased {len(erase_keys)} key(s) of {name}", details=reply)

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/graphql",
                                            json={"query": query, "variables": variables})  # fmt: skip
        return result

    def query_offline(
        self,
        inputs: list[FeatureRef],
        outputs: list[FeatureRef],
        timestamp_column: str,
        input_dataframe: pd.DataFrame | None = None,
        input_s3: str | None = None,
        output_s3: str | None = None,
        feature_to_column_map: dict[str, str] | None = None,
        workflow: str | None = None,  # Fennel's label for its logs: accepted, not recorded
        *,
        format: str = "pandas",  # noqa: A002 - Fennel's name
        input_format: str = "parquet",
        output_format: str = "parquet",
        wait: bool = False,
        timeout: float = 3600.0,
    ) -> dict[str, Any] | pd.DataFrame:
        """As ``LocalClient.query_offline``, through the server (the deployment's Dagster
        runs it). A DataFrame input travels in the request; ``wait=True`` with
        ``format="pandas"`` brings a DataFrame input's result back the same way."""
        body: dict[str, Any] = {
            "inputs": [feature_name(i) for i in inputs],
            "outputs": [feature_name(o) for o in outputs],
            "timestamp_column": timestamp_column, "input_s3": input_s3, "output_s3": output_s3,
            "feature_to_column_map": feature_to_column_map or {},
            "input_format": input_format, "output_format": output_format,
        }  # fmt: skip
        if input_dataframe is not None:
            body["data"] = {str(c): json_column(input_dataframe[c])
                            for c in input_dataframe.columns}  # fmt: skip
        status: dict[str, Any] = self._call("POST", "/api/v1/query_offline", json=body)
        if not wait:
            return status
        final = self.wait_offline_query(status["request_id"], timeout)
        if input_dataframe is None or format != "pandas":
            return final
        reply = self._call("GET", f"/api/v1/query_offline/{status['request_id']}/result")
        stamps = reply["data"].pop(timestamp_column)
        out = _typed(reply["data"], reply["types"])
        out[timestamp_column] = pd.to_datetime(pd.Series(stamps), utc=True)
        return out

    def track_offline_query(self, request_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/api/v1/query_offline/{int(request_id)}")
        return result

    def cancel_offline_query(self, request_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "POST", f"/api/v1/query_offline/{int(request_id)}/cancel"
        )
        return result

    def wait_offline_query(self, request_id: int, timeout: float = 3600.0) -> dict[str, Any]:
        return wait_until_finished(lambda: self.track_offline_query(request_id), timeout)

    # ---------------------------------------------------------------- write path

    def log(
        self, webhook: str, endpoint: str, df: pd.DataFrame, batch_size: int = 1000
    ) -> LogResult:
        """Rows to a webhook endpoint, ``batch_size`` per request: every branch's datasets
        sourcing from it receive them (a webhook is the namespace's, as in Fennel)."""
        if batch_size < 1:
            raise ClientError(f"log({webhook}.{endpoint}): batch_size must be at least 1")
        accepted = 0
        for start in range(0, len(df), batch_size):
            part = df.iloc[start : start + batch_size]
            data = {str(c): json_column(part[c]) for c in part.columns}
            accepted += self._call("POST", f"/api/v1/log/{webhook}/{endpoint}",
                                   json={"data": data})["accepted"]  # fmt: skip
        return LogResult(accepted)

    # ---------------------------------------------------------------- test hooks (fennel.testing)

    STARTING_RETRY_S = 60.0  # how long a lookup retries 503s of partitions still starting
    SETTLE_RETRY_S = 15.0  # and after a commit answered ready (runners of jobs it replaced
    # may still be handing over)

    def sleep(self, seconds: float | None = None, timeout: float | None = None) -> dict[str, Any]:
        """A barrier, served by ``/api/v1/sleep``: returns once every stream job of the
        branch has processed everything logged before the call; raises ``BarrierTimeout``
        naming the job partitions still behind. ``seconds`` (Fennel's fixed wait) is the
        least the barrier waits before giving up (60 s by default); ``timeout`` overrides."""
        wait = sleep_timeout(seconds, timeout)
        try:
            result: dict[str, Any] = self._call(
                "POST", "/api/v1/sleep", json={"timeout": wait}, timeout=wait + 30
            )
        except ServerError as e:
            if e.status == 504:
                raise BarrierTimeout(str(e)) from None
            raise
        return result

    def is_integration_client(self) -> bool:
        """True: a real deployment answers (Fennel's tests branch on it)."""
        return True

    def integration_mode(self) -> str:
        return "platform"

    def _note_starting(self, commit_answer: dict[str, Any]) -> None:
        """After a commit: until when a 503 is its partitions starting (or handing over)
        rather than an engine lost."""
        starting = commit_answer.get("starting") or []
        wait = self.STARTING_RETRY_S if starting else self.SETTLE_RETRY_S
        self._starting_until = time.monotonic() + wait

    def _retry_starting(self) -> bool:
        """Whether to retry a 503 (after a short pause): within ``STARTING_RETRY_S`` of a
        commit whose partitions were starting, or ``SETTLE_RETRY_S`` of one answered ready;
        later a 503 fails at once (an engine lost, not one starting)."""
        until = getattr(self, "_starting_until", 0.0)
        if time.monotonic() >= until:
            return False
        time.sleep(0.25)
        return True


def _name_of(dataset: DatasetRef) -> str:
    return dataset_name(dataset)


def _typed(data: dict[str, list[Any]], types: dict[str, Any]) -> pd.DataFrame:
    """Columns of an answer in their types (``types``: each column's, as the wire encodes it);
    a struct value an object of its class and a missing one None, as the MockClient answers
    a Python extractor's."""
    out = {}
    for c, v in data.items():
        dtype = codec.from_jsonable(types[c])
        out[c] = typed_series(v, dtype)
        if holds_struct(dtype):
            out[c] = pd.Series([None if x is None else answer_value(x, dtype)
                                for x in out[c].tolist()], dtype=object)  # fmt: skip
    return pd.DataFrame(out)
