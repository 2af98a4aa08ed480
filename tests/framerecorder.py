"""A stand-in for the daemon's socket: it records the frames the plugin binary sends and
answers each with the reply frame the test gives (or closes without one). The tests of
the plugin's side of the protocol (tests/unit/test_plugin_frame.py,
tests/integration/test_version_skew.py) exec the real binary against it.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Exec:
    rc: int
    stdout: str
    stderr: str

    @property
    def out(self) -> Any:
        return json.loads(self.stdout) if self.stdout.strip() else None


class FrameRecorder:
    """A Unix socket at ``path`` that records each frame's body in :attr:`frames` and
    answers :attr:`reply` (a dict sent as the reply frame's JSON, or bytes sent as its body
    as they are) after :attr:`delay` seconds; with :attr:`answer` False it closes
    unanswered."""

    def __init__(self, path: str | Path, reply: dict[str, Any] | bytes | None = None) -> None:
        self.path = str(path)
        self.reply: dict[str, Any] | bytes = (
            reply if reply is not None else {"status": 0, "output": "", "proto": 2})
        self.answer = True
        self.delay = 0.0
        self.frames: list[bytes] = []
        recorder = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock = self.request
                head = sock.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">I", head)
                body = b""
                while len(body) < size:
                    chunk = sock.recv(size - len(body))
                    if not chunk:
                        return
                    body += chunk
                recorder.frames.append(body)
                if recorder.answer:
                    reply = recorder.reply
                    data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                    time.sleep(recorder.delay)
                    try:
                        sock.sendall(struct.pack(">I", len(data)) + data)
                    except OSError:
                        pass  # the plugin gave up waiting

        self.server = socketserver.UnixStreamServer(self.path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> FrameRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def exec_plugin(binary: str | Path, command: str, stdin: bytes, *, name: str = "netctl-cni",
                env: dict[str, str] | None = None, cwd: str | None = None,
                default_socket_dir: str | None = None) -> Exec:
    """Exec the plugin ``binary`` as ``name`` (its argv[0]) with CNI_COMMAND=``command``.

    With ``default_socket_dir``, the plugin runs in a private mount namespace whose
    /run/netctl is that directory: the default socket (a stdin that names none) is
    then the test's, and the host's /run is never touched."""
    full = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": command, "CNI_CONTAINERID": "c1",
            "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
            "CNI_ARGS": "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web", "CNI_PATH": "/opt/cni/bin",
            **(env or {})}
    argv: list[str] = [name]
    executable = str(binary)
    if default_socket_dir is not None:
        script = ('mount -t tmpfs nct-run /run && mkdir -p /run/netctl && '
                  'mount --bind "$1" /run/netctl && exec -a "$2" "$3"')
        argv = ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", script,
                "bash", default_socket_dir, name, executable]
        executable = "/usr/bin/unshare"
    proc = subprocess.run(argv, executable=executable, input=stdin, env=full,
                          capture_output=True, timeout=60, cwd=cwd)
    return Exec(proc.returncode, proc.stdout.decode(errors="replace"),
                proc.stderr.decode(errors="replace"))
