"""A DaemonSet's pod run by podman the way kubelet runs it, for tests of the manifests and
the image: no kubelet or cluster here, so this does, for one pod template, what kubelet
does with it.

- The pod template is read from the manifest as it is (``deploy/kubernetes/daemonset.yaml``)
  and its ConfigMap volumes from the ConfigMaps in the same file.
- Host paths: each ``hostPath`` volume is the fake host's path (:class:`tests.fakehost.
  FakeHost`), except those the test shares with this machine (``shared``: the socket
  directory the runtime's plugin reaches, the netns directory the runtime mounts in);
  ``DirectoryOrCreate`` makes it.
- Each container is one ``podman run``: ``hostNetwork`` → ``--network host``, ``hostPID`` →
  ``--pid host``, ``privileged``, the env with ``fieldRef: spec.nodeName`` filled in and
  ``configMapKeyRef`` read from the test's ConfigMaps (an optional one missing: unset),
  every volume mount (``readOnly`` → ``ro``, ``HostToContainer`` → ``rslave``, mounts are
  recursive), ``command`` as the container's command. Init containers run to completion
  in order, each must exit 0; then the containers start. ``resources`` are not applied
  (no cgroup delegation here), and the test may rewrite a command (``--in-cluster`` →
  the fake API server's kubeconfig, mounted at :data:`KUBECONFIG`).
- Probes are HTTP GETs to the pod's port on this machine (host network), or exec probes
  run with ``podman exec``, under their ``timeoutSeconds``:
  :meth:`Kubelet.probe` once, :meth:`Kubelet.wait_probe` until it passes, and
  :meth:`Kubelet.watch_liveness`, which counts consecutive failures as kubelet does and,
  at ``failureThreshold``, kills the container (SIGTERM, then SIGKILL after the probe's
  ``terminationGracePeriodSeconds``, or a shorter grace the test gives) and starts it
  again, as kubelet restarts it in place.

Everything it starts is removed by :meth:`Kubelet.close` (``podman rm -f``), even after a
failure.
"""

from __future__ import annotations

import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.fakehost import FakeHost

KUBECONFIG = "/etc/netctl-test/kubeconfig"


class PodError(RuntimeError):
    pass


def documents(manifest: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest.read_text()) if d]


class Kubelet:
    def __init__(self, manifest: Path, host: FakeHost, scratch: Path, *, node: str,
                 podman: Sequence[str], env: Mapping[str, str],
                 shared: Sequence[str] = (), image: str | None = None,
                 rewrite: Callable[[str, list[str]], list[str]] | None = None,
                 extra_mounts: Sequence[tuple[str, str]] = ()) -> None:
        docs = documents(manifest)
        (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
        self.spec: dict[str, Any] = ds["spec"]["template"]["spec"]
        self.config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
                            if d["kind"] == "ConfigMap"}
        self.host, self.scratch, self.node = host, scratch, node
        self.podman, self.env = list(podman), dict(env)
        self.shared, self.image, self.rewrite = set(shared), image, rewrite
        self.extra_mounts = list(extra_mounts)
        self.tag = secrets.token_hex(3)
        self.started: list[str] = []  # names of the containers made, for close()
        self.restarts: dict[str, int] = {}

    # -- podman ------------------------------------------------------------------------

    def run_podman(self, *args: str, timeout: float = 120, check: bool = True
                   ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.podman, *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise PodError(f"podman {' '.join(args[:3])}… exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-2000:]}")
        return proc

    def name(self, container: str) -> str:
        return f"netctl-ds-{self.tag}-{container}"

    def container(self, name: str) -> dict[str, Any]:
        (found,) = [c for c in self.spec.get("initContainers", []) + self.spec["containers"]
                    if c["name"] == name]
        return found

    # -- the pod -----------------------------------------------------------------------

    def volume_source(self, volume: dict[str, Any]) -> str:
        if "hostPath" in volume:
            path = volume["hostPath"]["path"]
            where = Path(path) if path in self.shared else self.host.path(path)
            kind = volume["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                where.mkdir(parents=True, exist_ok=True)
            elif kind == "Directory" and not where.is_dir():
                raise PodError(f"hostPath {path} ({where}) is not a directory")
            return str(where)
        if "configMap" in volume:
            data = self.config_maps[volume["configMap"]["name"]]
            where = self.scratch / f"configmap-{volume['name']}"
            where.mkdir(parents=True, exist_ok=True)
            for key, value in data.items():
                (where / key).write_text(value)
            return str(where)
        raise PodError(f"volume {volume['name']}: only hostPath and configMap are run here")

    def run_args(self, c: dict[str, Any]) -> list[str]:
        args = ["--name", self.name(c["name"])]
        if self.spec.get("hostNetwork"):
            args += ["--network", "host"]
        if self.spec.get("hostPID"):
            args += ["--pid", "host"]
        if (c.get("securityContext") or {}).get("privileged"):
            args.append("--privileged")
        for var in c.get("env", []):
            ref = var.get("valueFrom", {}).get("configMapKeyRef")
            if "value" in var:
                value = var["value"]
            elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
                    "spec.nodeName":
                value = self.node
            elif ref is not None:  # as kubelet: an optional key that is not there is skipped
                found = self.config_maps.get(ref["name"], {}).get(ref["key"])
                if found is None and ref.get("optional"):
                    continue
                if found is None:
                    raise PodError(f"env {var['name']}: ConfigMap {ref['name']} has no "
                                   f"{ref['key']}")
                value = found
            else:
                raise PodError(f"env {var['name']}: not run here")
            args += ["--env", f"{var['name']}={value}"]
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            opts = ["rbind"]
            if m.get("readOnly"):
                opts.append("ro")
            if m.get("mountPropagation") == "HostToContainer":
                opts.append("rslave")
            elif m.get("mountPropagation") not in (None, "None"):
                raise PodError(f"mountPropagation {m['mountPropagation']}: not run here")
            source = self.volume_source(volumes[m["name"]])
            args += ["--volume", f"{source}:{m['mountPath']}:{','.join(opts)}"]
        for source, target in self.extra_mounts:
            args += ["--volume", f"{source}:{target}:ro"]
        command = list(c.get("command", [])) + list(c.get("args", []))
        if self.rewrite is not None:
            command = self.rewrite(c["name"], command)
        return [*args, self.image or c["image"], *command]

    def run_init_containers(self, timeout: float = 120) -> None:
        for c in self.spec.get("initContainers", []):
            self.started.append(self.name(c["name"]))
            proc = self.run_podman("run", *self.run_args(c), timeout=timeout, check=False)
            if proc.returncode != 0:
                raise PodError(f"init container {c['name']} exited {proc.returncode}: "
                               f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}")

    def start_containers(self) -> None:
        for c in self.spec["containers"]:
            self.started.append(self.name(c["name"]))
            self.run_podman("run", "--detach", *self.run_args(c))

    def logs(self, container: str) -> str:
        proc = self.run_podman("logs", self.name(container), check=False)
        return (proc.stdout + proc.stderr)[-4000:]

    def pid(self, container: str) -> int:
        """The container's first process, as this machine (the host's PID namespace)
        sees it."""
        out = self.run_podman("inspect", "--format", "{{.State.Pid}}", self.name(container))
        return int(out.stdout.strip())

    def running(self, container: str) -> bool:
        out = self.run_podman("inspect", "--format", "{{.State.Running}}",
                              self.name(container), check=False)
        return out.stdout.strip() == "true"

    # -- probes ------------------------------------------------------------------------

    def probe(self, container: str, kind: str) -> bool:
        """One probe: an HTTP GET answered 200 to 399 within ``timeoutSeconds`` (the pod's
        host network: this machine's loopback; a port by its name), or an exec probe
        exiting 0 within it."""
        spec = self.container(container)[kind]
        timeout = float(spec.get("timeoutSeconds", 1))
        if "httpGet" in spec:
            get = spec["httpGet"]
            port = get["port"]
            if isinstance(port, str):
                (port,) = [p["containerPort"] for p in self.container(container)["ports"]
                           if p["name"] == port]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{get['path']}",
                                            timeout=timeout) as answer:
                    return 200 <= int(answer.status) < 400
            except (OSError, urllib.error.HTTPError):
                return False
        try:
            proc = subprocess.run([*self.podman, "exec", self.name(container),
                                   *spec["exec"]["command"]], capture_output=True,
                                  env=self.env, timeout=timeout + 5)  # podman's own start-up
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    def wait_probe(self, container: str, kind: str, timeout: float = 120) -> float:
        """Probe every half second until it passes; the seconds it took."""
        started = time.monotonic()
        while not self.probe(container, kind):
            if time.monotonic() - started > timeout:
                raise PodError(f"{kind} of {container} still failing after {timeout:g} s:\n"
                               f"{self.logs(container)}")
            if not self.running(container):
                raise PodError(f"{container} exited:\n{self.logs(container)}")
            time.sleep(0.5)  # the next probe (kubelet's periodSeconds, shortened)
        return time.monotonic() - started

    def watch_liveness(self, container: str, rounds: int, interval: float = 0.5,
                       grace: int | None = None) -> list[bool]:
        """Run the liveness probe ``rounds`` times (``interval`` apart instead of
        ``periodSeconds``, to keep the test short); at ``failureThreshold`` failures in a
        row, restart the container as kubelet does. The results, in order. ``grace``: the
        seconds from the SIGTERM to the SIGKILL instead of the probe's
        ``terminationGracePeriodSeconds`` (for a container that cannot act on its SIGTERM
        anyway: a stopped process waits the whole grace out)."""
        spec = self.container(container)["livenessProbe"]
        threshold = int(spec.get("failureThreshold", 3))
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds",
                                 self.spec.get("terminationGracePeriodSeconds", 30)))
        results: list[bool] = []
        failures = 0
        for _ in range(rounds):
            ok = self.probe(container, "livenessProbe")
            results.append(ok)
            failures = 0 if ok else failures + 1
            if failures >= threshold:
                self.run_podman("stop", "--time", str(grace), self.name(container),
                                timeout=grace + 60)
                self.run_podman("start", self.name(container))
                self.restarts[container] = self.restarts.get(container, 0) + 1
                return results
            time.sleep(interval)
        return results

    def close(self) -> None:
        for name in reversed(self.started):
            self.run_podman("rm", "--force", "--time", "0", name, check=False, timeout=120)
        leftover = [n for n in self.started
                    if self.run_podman("container", "exists", n, check=False).returncode == 0]
        if leftover:
            raise PodError(f"containers left: {leftover}")

