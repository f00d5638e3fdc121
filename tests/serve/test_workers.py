"""The sockets of ``serve --workers N``: each worker binds its own, and a taken port fails
once, in the parent, naming the port and the fix."""

from __future__ import annotations

import socket

import pytest

from fennel_dagster.serve.workers import WorkersFailed, bind


def test_workers_share_a_port_and_a_taken_port_is_refused_by_name() -> None:
    first = bind("127.0.0.1", 0)
    port = first.getsockname()[1]
    second = bind("127.0.0.1", port)  # another worker's socket on the same port
    try:
        assert second.getsockname()[1] == port
        assert second.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        with pytest.raises(WorkersFailed, match=f"127.0.0.1:{port}.*--port"):
            bind("127.0.0.1", port, shared=False)
    finally:
        first.close()
        second.close()
    bind("127.0.0.1", port, shared=False).close()  # free again once the workers are gone
