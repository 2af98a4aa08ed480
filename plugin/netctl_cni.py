#!/usr/bin/env python3
"""netctl-cni: the thin CNI plugin. Standard library only; never imports netctl.

Kubelet's runtime execs this once per pod sandbox, so it does as little as it
can: read the CNI_* variables and stdin, make CNI_NETNS absolute, send one
length-framed JSON request to the daemon's Unix socket (``"socket"`` in the
network config — in its ``ipam`` section when run as ``netctl-ipam`` — default
/run/netctl/netctl.sock), print the answer, exit 0 or 1.

- The frame carries the network config without growing it (:func:`frame_body`):
  a stdin that is a JSON object goes in verbatim, as the raw JSON value of
  ``"config"``; escaping it into a string would make every ``\\u003c`` (Go's
  ``<``) 7 bytes and every ``\\"`` 4. Only a stdin that is not a JSON object (or
  holds a ``\\ud…`` escape, which the daemon's decoder may refuse where Python's
  accepts it) goes as the string ``"stdin"``, as older plugins sent every stdin.
- A DEL leaves the pod's annotations out of ``runtimeConfig``
  (``io.kubernetes.cri.pod-annotations``, up to megabytes): a DEL needs nothing
  but the journal, and must never be refused for its size.

- VERSION is answered here, without the daemon; so is a stdin that is not a
  JSON object (code 6): it cannot say which socket to use.
- Daemon unreachable: ADD and CHECK fail at once with code 11 (try again
  later); STATUS with code 50; DEL writes its request to a durable record in
  ``pending-del/`` beside the socket (written to a temporary name, fsynced,
  renamed, so a record is whole or absent) and exits 0 with a warning: the
  daemon finishes recorded DELs in its start-up replay, before it serves. A DEL
  that cannot even be recorded exits 1 (code 11), so the runtime retries it.

Start-up is on every pod's critical path, so it imports only modules built into
the interpreter (``_json``, ``_socket``): the ``json``, ``socket`` and ``struct``
packages would pull in ``re``, ``enum``, ``selectors`` and more, doubling the
time to first instruction. ``netctl install-cni`` runs it with ``python -IS``.
"""

import _json
import _socket
import os
import sys

DEFAULT_SOCKET = "/run/netctl/netctl.sock"
SUPPORTED = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
PENDING_DIR = "pending-del"  # beside the socket: DELs recorded while the daemon was down
POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"  # runtimeConfig: dropped from a DEL
CONNECT_TIMEOUT = 2.0
REPLY_TIMEOUT = float(os.environ.get("NETCTL_REPLY_TIMEOUT", "300"))


class _JSONContext:
    """What ``_json.make_scanner`` reads from a decoder: the stdlib defaults, strict."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, object] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")


_scan = _json.make_scanner(_JSONContext())  # type: ignore[arg-type]  # duck-typed context
_quote = _json.encode_basestring_ascii


def loads(text: str) -> object:
    """Decode one JSON document (the stdlib decoder's C scanner, without its imports)."""
    text = text.strip()
    try:
        obj, end = _scan(text, 0)
        if end == len(text):
            return obj
    except (StopIteration, SystemError):  # _json reports errors through json.decoder
        pass
    import json  # only on the error path, for the stdlib's precise message

    return json.loads(text)


def dumps(obj: object) -> str:
    """Encode what :func:`loads` returns: str, int, finite float, bool, None, lists and
    dicts with str keys (TypeError for anything else)."""
    if isinstance(obj, str):
        return str(_quote(obj))
    if obj is None or isinstance(obj, bool):
        return {None: "null", True: "true", False: "false"}[obj]
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):  # 1e999 reads as inf
            raise TypeError(f"cannot encode {obj!r}")
        return repr(obj)
    if isinstance(obj, list):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_quote(k)}:{dumps(v)}" for k, v in obj.items()) + "}"
    raise TypeError(f"cannot encode {type(obj).__name__}")


def frame_body(request: dict[str, str], command: str, conf: dict[str, object] | None,
               text: str) -> bytes:
    """The frame's JSON: ``request`` and the network config, ``text`` (stdin as read,
    stripped), ``conf`` when it is a JSON object. See the module's docstring."""
    if conf is not None and command == "DEL":
        runtime = conf.get("runtimeConfig")
        if isinstance(runtime, dict) and POD_ANNOTATIONS in runtime:
            slim = {**conf, "runtimeConfig": {k: v for k, v in runtime.items()
                                              if k != POD_ANNOTATIONS}}
            try:
                text = dumps(slim)
            except TypeError:
                pass  # sent whole: the daemon drops them too, and serves a DEL of any size
    head = dumps(request)[:-1]
    if conf is not None and "\\ud" not in text and "\\uD" not in text:
        return (head + ',"config":' + text + "}").encode()
    return (head + ',"stdin":' + dumps(text) + "}").encode()


def _error(version: str, code: int, msg: str) -> int:
    sys.stdout.write(dumps({"cniVersion": version, "code": code, "msg": msg}) + "\n")
    return 1


def _recv_exact(sock: _socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("daemon closed the connection before answering")
        buf += chunk
    return buf


def record_del(socket_path: str, body: bytes) -> str:
    """Leave the DEL's request where the daemon's start-up replay finds it; the record's
    path. Only on the path where the daemon is down, so its imports cost nothing else."""
    import time

    directory = os.path.join(os.path.dirname(socket_path) or ".", PENDING_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}"
    tmp, final = os.path.join(directory, f".{name}.tmp"), os.path.join(directory, name + ".del")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, final)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)  # the rename itself survives a crash
    finally:
        os.close(dfd)
    return final


def _del_unanswered(version: str, path: str, body: bytes, why: str) -> int:
    try:
        where = record_del(path, body)
    except OSError as exc:
        return _error(version, 11, f"{why}, and the DEL could not be recorded for it "
                      f"({exc.strerror or exc}); try again later")
    sys.stderr.write(f"warning: {why}; the DEL is recorded in {where} and finished by the "
                     "daemon's start-up replay\n")
    return 0


def main() -> int:
    env = os.environ
    command = env.get("CNI_COMMAND", "")
    stdin = sys.stdin.buffer.read()
    undecodable, text = "", ""
    try:
        text = stdin.decode("utf-8").strip()
        conf = loads(text)
        if not isinstance(conf, dict):
            conf, undecodable = {}, "not a JSON object"
    except ValueError as exc:  # UnicodeDecodeError included
        conf, undecodable = {}, str(exc)
    version = conf.get("cniVersion")
    if not isinstance(version, str):
        version = "1.1.0"
    if command == "VERSION":
        sys.stdout.write(dumps({"cniVersion": version, "supportedVersions": SUPPORTED}))
        return 0
    if undecodable and command != "DEL":
        # No config, so no "socket" to send it to: answer here (a DEL still goes
        # to the default socket, which may well be the daemon's).
        return _error(version, 6, f"netctl-cni: the network config on stdin is not valid: "
                      f"{undecodable}")
    plugin = os.path.basename(sys.argv[0]) or "netctl-cni"
    section = conf.get("ipam") if plugin == "netctl-ipam" else conf  # where "socket" is
    path = section.get("socket") if isinstance(section, dict) else ""
    path = path if isinstance(path, str) and path else DEFAULT_SOCKET
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
        "plugin": plugin,
    }
    body = frame_body(request, command, None if undecodable else conf,
                      text if not undecodable else stdin.decode("utf-8", "replace"))
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(path)
    except OSError as exc:
        sock.close()
        why = f"netctl daemon not reachable at {path} ({exc.strerror or exc})"
        if command == "DEL":
            return _del_unanswered(version, path, body, why)
        if command == "STATUS":
            return _error(version, 50, why)
        return _error(version, 11, why + "; try again later")
    try:
        sock.settimeout(REPLY_TIMEOUT)
        try:
            sock.sendall(len(body).to_bytes(4, "big") + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon refused the frame; its answer is already waiting
        size = int.from_bytes(_recv_exact(sock, 4), "big")
        reply = loads(_recv_exact(sock, size).decode("utf-8"))
        if not isinstance(reply, dict):
            raise ValueError("the answer is not a JSON object")
    except (OSError, ValueError) as exc:
        why = f"netctl daemon at {path} gave no answer ({exc})"
        if command == "DEL":
            return _del_unanswered(version, path, body, why)
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
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip interpreter teardown: nothing is left to clean up
