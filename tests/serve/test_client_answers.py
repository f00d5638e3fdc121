"""The HTTP client answers a query as LocalClient and the mock do: a missing string, or a
missing element of a list, is ``pd.NA`` (not the JSON's ``None``), in pandas' nullable
dtypes. A query server stand-in over httpx's transport."""

from __future__ import annotations

import httpx
import orjson
import pandas as pd

from fennel_dagster.client import Client
from fennel_dagster.wire import codec, spec


def test_a_query_answer_has_fennels_types() -> None:
    types = {"U.country": spec.OptionalType(spec.StringType()),
             "U.tags": spec.ListType(spec.OptionalType(spec.StringType())),
             "U.age": spec.OptionalType(spec.IntType())}  # fmt: skip

    def stand(request: httpx.Request) -> httpx.Response:
        body = {"data": {"U.country": ["USA", None], "U.tags": [["a", None], []],
                         "U.age": [3, None]},
                "types": {k: codec.to_jsonable(t) for k, t in types.items()}}  # fmt: skip
        return httpx.Response(200, content=orjson.dumps(body))

    c = Client("http://stand", "t")
    c.http = httpx.Client(base_url="http://stand", transport=httpx.MockTransport(stand))
    got = c.query(["U.uid"], list(types), pd.DataFrame({"U.uid": [1, 2]}))
    assert str(got["U.country"].dtype) == "string" and got["U.country"][1] is pd.NA
    assert got["U.tags"][0][1] is pd.NA
    assert str(got["U.age"].dtype) == "Int64" and got["U.age"][1] is pd.NA
