"""JSON messages over a Unix socket, one object per line: the protocol of the grader's forkserver
(`twoprim.grading.forkserver`) and of the warm kernels' zygote (`twoprim.learner.zygote`)."""

from __future__ import annotations

import json
import socket


def send(conn: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    """`message` as one line; `fds` go with it (SCM_RIGHTS)."""
    data = (json.dumps(message) + "\n").encode()
    if fds:
        socket.send_fds(conn, [data], list(fds))
    else:
        conn.sendall(data)


def receive(conn: socket.socket, limit: int) -> dict | None:
    """The next line as JSON; None when the peer closed first or the line runs past `limit` bytes."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > limit:
            return None
    return json.loads(data)
