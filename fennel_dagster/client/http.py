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
    answer_shape,
    dataset_name,
    feature_name,
    input_frame,
    refuse_feature_log,
)
from fennel_dagster.client.offline import wait_until_finished
from fennel_dagster.declare import commit_spec
from fennel_dagster.declare.answers import fennel_answer
from fennel_dagster.engine.barrier import BarrierTimeout, sleep_timeout
from fennel_dagster.engine.lookup_client import EngineUnavailable
from fennel_dagster.errors import ClientError
from fennel_dagster.ops.rows import json_column, typed_series
from fennel_dagster.wire import codec, encode

BRANCH_HEADER = "X-FENNEL-BRANCH"


class ServerError(ClientError):
    """The query server refused or failed a request; ``status`` is its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status


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
            raise ServerError(resp.status_code, body.get("error", resp.reason_phrase))
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
    ) -> CommitAnswer:
        """``ready_timeout``: seconds the server waits for engines to serve the branch's
        partitions; the answer's ``ready`` says whether they do, ``starting`` lists those
        that do not yet (lookups meeting 503 on them are retried until the deadline)."""
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
        return CommitAnswer(result)

    def init_branch(self, name: str) -> Done:
        self._call("POST", "/api/v1/init", json={}, branch=name)
        self._branch = name
        return Done(f"created branch {name!r}")

    def clone_branch(self, name: str, from_branch: str | None = None) -> Done:
        source = from_branch or self._branch
        self._call("POST", "/api/v1/init", json={"clone_from": source}, branch=name)
        self._branch = name
        return Done(f"cloned branch {source!r} to {name!r}")

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
        body: dict[str, Any] = {
            "inputs": names, "outputs": [feature_name(o) for o in outputs],
            "data": {n: json_column(df[n]) for n in names},
        }  # fmt: skip
        if timestamps is not None:
            body["timestamps"] = json_column(pd.to_datetime(pd.Series(timestamps), utc=True))
        reply = self._call("POST", "/api/v1/query", json=body, params={"typed": "true"})
        types = {c: codec.from_jsonable(t) for c, t in reply["types"].items()}
        return fennel_answer(_typed(reply["data"], reply["types"]), types)  # as LocalClient's

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
        keys = pd.DataFrame(keys).reset_index(drop=True)
        body: dict[str, Any] = {"keys": {c: json_column(keys[c]) for c in keys.columns},
                                "fields": fields or []}  # fmt: skip
        if timestamps is not None:
            body["timestamps"] = json_column(pd.to_datetime(pd.Series(timestamps), utc=True))
        name = dataset_name(dataset)
        reply = self._call("POST", f"/api/v1/dataset/{name}/lookup", json=body,
                           params={"typed": "true"})  # fmt: skip
        data = _typed(reply["data"], reply["types"])
        types = {c: codec.from_jsonable(t) for c, t in reply["types"].items()}
        return answer_shape(data, pd.Series(reply["found"], dtype=bool), fields, types)

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
        self, webhook: str, endpoint: str, df: pd.DataFrame, batch_size: int = 10_000
    ) -> LogResult:
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


class CommitAnswer(dict[str, Any]):
    """The server's answer to a commit (``commit_id``, ``ready``, ``starting``...), also an
    HTTP-like answer as the mock's ``Done`` and Fennel's clients give (``status_code`` 200,
    ``ok``, ``json()``)."""

    status_code = 200
    ok = True

    def json(self) -> dict[str, Any]:
        return dict(self)


def _typed(data: dict[str, list[Any]], types: dict[str, Any]) -> pd.DataFrame:
    """Columns of an answer in their types (``types``: each column's, as the wire encodes it)."""
    return pd.DataFrame(
        {c: typed_series(v, codec.from_jsonable(types[c])) for c, v in data.items()}
    )
