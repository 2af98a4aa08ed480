"""``python -m netctl.kubefake KUBECONFIG``: the fake API server as a process of its own, for
``make demo`` (``deploy/demo.sh``) and anyone who wants to point a daemon at it by hand.

It serves on 127.0.0.1 (an ephemeral port, no credentials) and, once listening, writes a
kubeconfig for it to KUBECONFIG (a temporary name renamed into place: the file appearing
is the signal that it is up). Clients change the cluster through the real HTTP API.
Signals: SIGUSR1 starts an outage (:meth:`FakeKube.stop`: no listener, every connection
cut, the cluster kept), SIGUSR2 ends it (:meth:`FakeKube.start`, the same port);
SIGTERM or SIGINT stop it. The signals are taken with ``sigwait`` in the main thread,
blocked everywhere else, so no handler runs inside the server's loop.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from .server import FakeKube

SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m netctl.kubefake KUBECONFIG", file=sys.stderr)
        return 2
    target = Path(argv[0])
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # before the server's thread starts
    with FakeKube(bookmark_interval=1.0) as kube:
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        kube.kubeconfig(tmp)
        tmp.replace(target)
        print(f"fake API server on {kube.url}, kubeconfig {target}", flush=True)
        while (sig := signal.sigwait(SIGNALS)) in (signal.SIGUSR1, signal.SIGUSR2):
            if sig == signal.SIGUSR1:
                kube.stop()
                print("outage: not listening", flush=True)
            else:
                kube.start()
                print(f"serving again on {kube.url}", flush=True)
        for failure in kube.server_errors:
            print(failure, file=sys.stderr)
        return 1 if kube.server_errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
