#!/usr/bin/env python3
"""netctl-cni: the thin CNI plugin. Standard library only; never imports netctl.

Kubelet's runtime execs this once per pod sandbox, so it does as little as it
can: read the CNI_* variables and stdin, make CNI_NETNS absolute, send one
length-framed JSON request to the daemon's Unix socket (``"socket"`` in the
network config, default /run/netctl/netctl.sock), print the answer, exit 0 or 1.

- VERSION is answered here, without the daemon; so is a stdin that is not a
  JSON object (code 6): it cannot say which socket to use.
- Daemon unreachable: ADD and CHECK fail at once with code 11 (try again
  later); STATUS with code 50; DEL exits 0 with a warning on stderr, because
  the daemon's journal holds all it needs to finish that DEL later.
"""

import json
import os
import socket
import struct
import sys

DEFAULT_SOCKET = "/run/netctl/netctl.sock"
SUPPORTED = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
CONNECT_TIMEOUT = 2.0
REPLY_TIMEOUT = float(os.environ.get("NETCTL_REPLY_TIMEOUT", "300"))


def _error(version: str, code: int, msg: str) -> int:
    sys.stdout.write(json.dumps({"cniVersion": version, "code": code, "msg": msg}) + "\n")
    return 1


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("daemon closed the connection before answering")
        buf += chunk
    return buf


def main() -> int:
    env = os.environ
    command = env.get("CNI_COMMAND", "")
    stdin = sys.stdin.buffer.read()
    undecodable = ""
    try:
        conf = json.loads(stdin)
        if not isinstance(conf, dict):
            conf, undecodable = {}, "not a JSON object"
    except ValueError as exc:
        conf, undecodable = {}, str(exc)
    version = conf.get("cniVersion")
    if not isinstance(version, str):
        version = "1.1.0"
    if command == "VERSION":
        sys.stdout.write(json.dumps({"cniVersion": version, "supportedVersions": SUPPORTED}))
        return 0
    if undecodable and command != "DEL":
        # No config, so no "socket" to send it to: answer here (a DEL still goes
        # to the default socket, which may well be the daemon's).
        return _error(version, 6, f"netctl-cni: the network config on stdin is not valid: "
                      f"{undecodable}")
    path = conf.get("socket") if isinstance(conf.get("socket"), str) else ""
    path = path or DEFAULT_SOCKET
    netns = env.get("CNI_NETNS", "")
    if netns and not os.path.isabs(netns):
        netns = os.path.abspath(netns)
    request = {
        "command": command,
        "container_id": env.get("CNI_CONTAINERID", ""),
        "netns": netns,
        "ifname": env.get("CNI_IFNAME", ""),
        "args": env.get("CNI_ARGS", ""),
        "path": env.get("CNI_PATH", ""),
        "stdin": stdin.decode("utf-8", "replace"),
        "plugin": os.path.basename(sys.argv[0]) or "netctl-cni",
    }
    body = json.dumps(request).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(path)
    except OSError as exc:
        sock.close()
        why = f"netctl daemon not reachable at {path} ({exc.strerror or exc})"
        if command == "DEL":
            sys.stderr.write(f"warning: {why}; the DEL is left to the daemon's journal and "
                             "reconciler\n")
            return 0
        if command == "STATUS":
            return _error(version, 50, why)
        return _error(version, 11, why + "; try again later")
    try:
        sock.settimeout(REPLY_TIMEOUT)
        try:
            sock.sendall(struct.pack(">I", len(body)) + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon refused the frame; its answer is already waiting
        (size,) = struct.unpack(">I", _recv_exact(sock, 4))
        reply = json.loads(_recv_exact(sock, size))
    except (OSError, ValueError, struct.error) as exc:
        why = f"netctl daemon at {path} gave no answer ({exc})"
        if command == "DEL":
            sys.stderr.write(f"warning: {why}; the DEL is left to the daemon's journal\n")
            return 0
        return _error(version, 11, why + "; try again later")
    finally:
        sock.close()
    if reply.get("warning"):
        sys.stderr.write(f"warning: {reply['warning']}\n")
    output = reply.get("output") or ""
    if output:
        sys.stdout.write(output + "\n")
    return 1 if reply.get("status") else 0


if __name__ == "__main__":
    sys.exit(main())
