"""``python -m netctl_kit.kubefake [--real] KUBECONFIG``: the fake API server as a process of its
own, for ``make demo`` (``deploy/demo.sh``) and anyone who wants to point a daemon at it by
hand; with ``--real``, a real kube-apiserver and etcd instead (:mod:`.real`), whose
kubeconfig carries netctl's ServiceAccount token, and ``KUBECONFIG.admin`` an
administrator's (the fake needs no credentials: both files are the same there).

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

from .real import RealKube, unavailable
from .server import FakeKube

SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2}


def main(argv: list[str]) -> int:
    real = argv[:1] == ["--real"]
    argv = argv[1:] if real else argv
    if len(argv) != 1:
        print("usage: python -m netctl_kit.kubefake [--real] KUBECONFIG", file=sys.stderr)
        return 2
    if real and (reason := unavailable()):
        print(f"python -m netctl_kit.kubefake --real: {reason}", file=sys.stderr)
        return 2
    target = Path(argv[0])
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # before the server's thread starts
    with RealKube() if real else FakeKube(bookmark_interval=1.0) as kube:
        admin = {"token": kube.admin_token} if isinstance(kube, RealKube) else {}
        kube.kubeconfig(target.with_name(f"{target.name}.admin"), **admin)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        kube.kubeconfig(tmp)
        tmp.replace(target)
        what = "a real kube-apiserver" if real else "fake API server"
        print(f"{what} on {kube.url}, kubeconfig {target}", flush=True)
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
