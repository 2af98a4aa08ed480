"""We test ``netctl install-cni --auto-config`` as the DaemonSet runs it, the real command
on real files in a temporary conf dir:

- with no primary config yet it blocks (saying so), waits out a primary written in two
  pieces (half a file is not taken for a config, nor the next file for the primary), then
  writes ``00-netctl.conflist`` and exits 0; ``--wait-timeout`` gives up with exit 1; a
  file sorting before ours is refused with exit 1 and nothing written;
- ``--watch`` follows the dir: the primary edited, a new primary sorting first, our file
  removed by hand — each regenerates it; SIGTERM stops it with exit 0 and the file stays;
- ``--replace-multus`` takes the place of Multus' ``00-multus.conf`` in one rename, and
  ``--uninstall`` puts it back;
- ``--uninstall`` removes the conf, the plugin and a killed writer's temporary file, and
  nothing else;
- the write, seen through inotify: the target is never created, opened for writing or
  modified in place, only renamed onto from a temporary file of the same dir whose name
  no runtime loads; an unchanged config is not written again;
- Debian's containerd 1.6 (skipped when it, runc or grpcio is missing) loads the
  generated conf as the network pods get, reloads it when ``--watch`` regenerates it
  after the primary changed, keeps it when the watcher stops, and is back on the primary
  after ``--uninstall`` — seen through the CRI Status RPC, as kubelet asks.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from netctl.cni.autoconfig import CONF_NAME, POD_ANNOTATIONS
from netctl.cni.confdir import loaded
from tests import cri
from tests.cni_samples import BRIDGE, CALICO, CILIUM, FLANNEL
from tests.conftest import NETCTL, SYSTEM_CNI, wait_for

SOCKET = "/run/nct-test/netctl.sock"


class Command:
    """``netctl install-cni`` running in the background, its output collected by line."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.conf_dir, self.bin_dir = tmp / "net.d", tmp / "bin"
        self.proc = subprocess.Popen(
            [NETCTL, "install-cni", "--bin-dir", str(self.bin_dir), "--cni-conf-dir",
             str(self.conf_dir), "--auto-config", "--socket", SOCKET, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_said(self, text: str, timeout: float = 10) -> None:
        try:
            wait_for(lambda: self.said(text), timeout, f"{text!r} in {self.lines}")
        except Exception:
            self.stop()
            raise

    def wait(self, timeout: float = 10) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        return self.wait()


def generated(conf_dir: Path) -> dict[str, Any]:
    obj = json.loads((conf_dir / CONF_NAME).read_text())
    assert isinstance(obj, dict)
    return obj


def write(conf_dir: Path, sample: tuple[str, dict[str, Any]]) -> Path:
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / sample[0]
    path.write_text(json.dumps(sample[1]))
    return path


def cluster_network(conf_dir: Path) -> str:
    return str(generated(conf_dir)["plugins"][0]["clusterNetwork"])


def test_waits_for_a_primary_written_later_even_in_pieces(tmp_path: Path) -> None:
    cmd = Command(tmp_path)
    cmd.wait_said("no primary CNI config yet")
    assert cmd.proc.poll() is None and cmd.conf_dir.is_dir()  # made, watched, waiting
    assert sorted(p.name for p in cmd.bin_dir.iterdir()) == ["netctl-cni", "netctl-ipam"]

    body = json.dumps(FLANNEL[1]).encode()
    with open(cmd.conf_dir / FLANNEL[0], "wb") as fh:  # as flannel's `cp` writes it
        fh.write(body[:40])
        fh.flush()
        cmd.wait_said(f"{FLANNEL[0]} is not valid JSON")
        write(cmd.conf_dir, ("20-later.conflist", CALICO[1]))  # not taken meanwhile
        assert cmd.proc.poll() is None and not (cmd.conf_dir / CONF_NAME).exists()
        fh.write(body[40:])
    assert cmd.wait() == 0, cmd.lines
    assert generated(cmd.conf_dir) == {
        "cniVersion": "0.3.1", "name": "netctl",
        "plugins": [{"type": "netctl-cni", "socket": SOCKET,
                     "clusterNetwork": str(cmd.conf_dir / FLANNEL[0]),
                     "capabilities": {POD_ANNOTATIONS: True, "portMappings": True}}]}
    assert cmd.said(f"wrote {cmd.conf_dir / CONF_NAME}: clusterNetwork "
                    f"{cmd.conf_dir / FLANNEL[0]}, cniVersion 0.3.1")


def test_gives_up_after_the_wait_timeout(tmp_path: Path) -> None:
    cmd = Command(tmp_path, "--wait-timeout", "0.3")
    assert cmd.wait() == 1
    assert cmd.said("gave up after 0.3s: no primary CNI config yet"), cmd.lines


def test_a_config_that_would_shadow_netctls_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "net.d", ("00-multus.conf", {
        "cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim"}))
    write(tmp_path / "net.d", CALICO)
    cmd = Command(tmp_path)
    assert cmd.wait() == 1
    assert cmd.said("refused: ") and cmd.said("00-multus.conf sorts before 00-netctl.conflist")
    assert not (tmp_path / "net.d" / CONF_NAME).exists()


def test_watch_follows_the_dir_and_sigterm_leaves_the_conf(tmp_path: Path) -> None:
    conf_dir = tmp_path / "net.d"
    primary = write(conf_dir, CALICO)
    cmd = Command(tmp_path, "--watch")
    try:
        wait_for(lambda: (conf_dir / CONF_NAME).exists(), 10, "the first write")
        assert cluster_network(conf_dir) == str(primary)
        assert generated(conf_dir)["plugins"][0]["capabilities"] == {
            "bandwidth": True, POD_ANNOTATIONS: True, "portMappings": True}

        # the primary CNI rewrites its config: new cniVersion, no bandwidth plugin
        edited = json.loads(json.dumps(CALICO[1]))
        edited["cniVersion"] = "1.0.0"
        edited["plugins"].pop()
        primary.write_text(json.dumps(edited))
        wait_for(lambda: generated(conf_dir)["cniVersion"] == "1.0.0", 10, "regenerated")
        assert generated(conf_dir)["plugins"][0]["capabilities"] == {
            POD_ANNOTATIONS: True, "portMappings": True}

        # another primary now comes first in load order
        cilium = write(conf_dir, CILIUM)
        wait_for(lambda: cluster_network(conf_dir) == str(cilium), 10, "cilium as primary")

        # our file removed by hand: written again
        (conf_dir / CONF_NAME).unlink()
        wait_for(lambda: (conf_dir / CONF_NAME).exists(), 10, "the conf written again")
        assert cluster_network(conf_dir) == str(cilium)
    finally:
        rc = cmd.stop()
    assert rc == 0, cmd.lines
    assert cluster_network(conf_dir) == str(cilium)  # SIGTERM never removes it
    assert sorted(p.name for p in conf_dir.iterdir()) == [
        CONF_NAME, CILIUM[0], CALICO[0]]  # and no temporary file is left


def test_uninstall_removes_the_conf_the_plugin_and_leftovers_only(tmp_path: Path) -> None:
    conf_dir = tmp_path / "net.d"
    primary = write(conf_dir, FLANNEL)
    assert Command(tmp_path).wait() == 0
    stray = conf_dir / f".{CONF_NAME}.99999.tmp"
    stray.write_text("{")  # a writer killed half-way
    other = tmp_path / "bin" / "bridge"
    other.write_text("#!/bin/sh\n")
    cmd = Command(tmp_path, "--uninstall")
    assert cmd.wait() == 0, cmd.lines
    assert sorted(cmd.lines) == sorted(f"removed {p}" for p in (
        conf_dir / CONF_NAME, stray, tmp_path / "bin" / "netctl-cni",
        tmp_path / "bin" / "netctl-ipam"))
    assert [p.name for p in conf_dir.iterdir()] == [primary.name]
    assert [p.name for p in (tmp_path / "bin").iterdir()] == ["bridge"]
    assert Command(tmp_path, "--uninstall").wait() == 0  # twice: nothing left to do


def test_replace_multus_takes_its_place_in_one_rename_and_uninstall_puts_it_back(
        tmp_path: Path) -> None:
    """``--replace-multus``: netctl's conf is written behind Multus' first, then Multus'
    is renamed to a name no runtime loads, so at every moment a meta-plugin's config is the
    runtime's first; ``--uninstall`` puts Multus' back before it removes netctl's."""
    conf_dir = tmp_path / "net.d"
    multus = {"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim"}
    write(conf_dir, ("00-multus.conf", multus))
    primary = write(conf_dir, CALICO)
    cmd = Command(tmp_path, "--replace-multus")
    assert cmd.wait() == 0, cmd.lines
    assert cmd.said("took the place of Multus'"), cmd.lines
    first = sorted(p.name for p in conf_dir.iterdir() if loaded(p.name))[0]
    assert first == CONF_NAME
    assert json.loads((conf_dir / CONF_NAME).read_text())["plugins"][0][
        "clusterNetwork"] == str(primary)
    assert json.loads((conf_dir / ".00-multus.conf.netctl-replaced").read_text()) == multus
    cmd = Command(tmp_path, "--uninstall")
    assert cmd.wait() == 0, cmd.lines
    assert cmd.said(f"restored {conf_dir / '00-multus.conf'}"), cmd.lines
    assert sorted(p.name for p in conf_dir.iterdir()) == ["00-multus.conf", primary.name]
    assert json.loads((conf_dir / "00-multus.conf").read_text()) == multus


# --- inotify, read by the test itself -----------------------------------------------

_NAMES = {0x2: "MODIFY", 0x8: "CLOSE_WRITE", 0x20: "OPEN", 0x40: "MOVED_FROM",
          0x80: "MOVED_TO", 0x100: "CREATE", 0x200: "DELETE"}


class Inotify:
    def __init__(self, directory: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0 and libc.inotify_add_watch(
            self.fd, os.fsencode(directory), 0xFFF) >= 0

    def events(self) -> list[tuple[str, str]]:
        """(name, event) for each event so far, in order."""
        out: list[tuple[str, str]] = []
        try:
            while buf := os.read(self.fd, 65536):
                i = 0
                while i < len(buf):
                    _, mask, _, size = struct.unpack_from("iIII", buf, i)
                    name = buf[i + 16:i + 16 + size].rstrip(b"\0").decode()
                    out += [(name, label) for bit, label in _NAMES.items() if mask & bit]
                    i += 16 + size
        except BlockingIOError:
            pass
        return out

    def close(self) -> None:
        os.close(self.fd)


def test_the_write_is_a_rename_inside_the_dir(tmp_path: Path) -> None:
    conf_dir = tmp_path / "net.d"
    primary = write(conf_dir, FLANNEL)
    assert Command(tmp_path).wait() == 0
    edited = {**FLANNEL[1], "cniVersion": "1.0.0"}
    primary.write_text(json.dumps(edited))
    watch = Inotify(conf_dir)
    try:
        assert Command(tmp_path).wait() == 0
        events = watch.events()
        on_target = {e for name, e in events if name == CONF_NAME}
        assert on_target & {"CREATE", "MODIFY", "CLOSE_WRITE"} == set(), events
        assert "MOVED_TO" in on_target
        (tmp,) = {name for name, e in events if e == "MOVED_FROM"}
        assert tmp.startswith(f".{CONF_NAME}.") and not loaded(tmp)
        assert ((tmp, "CREATE") in events and (tmp, "CLOSE_WRITE") in events
                and events.index((tmp, "CLOSE_WRITE")) < events.index((tmp, "MOVED_FROM")))
        assert generated(conf_dir)["cniVersion"] == "1.0.0"

        cmd = Command(tmp_path)  # nothing changed: not written again
        assert cmd.wait() == 0 and cmd.said("up to date:")
        assert [e for e in watch.events() if e[1] in ("MOVED_TO", "CREATE")] == []
    finally:
        watch.close()


@pytest.mark.parametrize("flag", [["--watch"], ["--watch", "--uninstall"]])
def test_watch_needs_auto_config_and_no_uninstall(tmp_path: Path, flag: list[str]) -> None:
    args = [NETCTL, "install-cni", "--bin-dir", str(tmp_path), *flag]
    res = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 2 and "--watch goes with --auto-config" in res.stderr


# --- containerd 1.6 picks it up -----------------------------------------------------


@pytest.mark.skipif(bool(cri.unavailable()), reason=cri.unavailable() or "-")
def test_containerd_loads_the_generated_conf_and_follows_it(tmp_path: Path) -> None:
    """Debian's containerd, its CRI plugin on our conf dir: the runtime's own view of
    which network it would run pods on (CRI Status, verbose ``cniconfig``)."""
    conf_dir, bin_dir = tmp_path / "net.d", tmp_path / "bin"
    bin_dir.mkdir()
    for plugin in Path(SYSTEM_CNI).iterdir():
        (bin_dir / plugin.name).symlink_to(plugin)
    primary = write(conf_dir, BRIDGE)

    def loaded_networks(ctd: cri.Containerd) -> list[dict[str, Any]]:
        status = ctd.status()
        assert status.network_ready, status.conditions
        return [{"name": n["name"], "cniVersion": n["cniVersion"],
                 "source": json.loads(n["source"])} for n in status.cni_networks()]

    def default_network(ctd: cri.Containerd) -> dict[str, Any]:
        lo, net = loaded_networks(ctd)  # loopback, then the one pods get (max_conf_num 1)
        assert lo["name"] == "cni-loopback"
        return net

    with cri.Containerd(conf_dir, bin_dir) as ctd:
        assert default_network(ctd)["name"] == BRIDGE[1]["name"]
        cmd = Command(tmp_path, "--watch")
        try:
            net = wait_for(lambda: (n := default_network(ctd))["name"] == "netctl" and n,
                           15, f"containerd to load {CONF_NAME}: {ctd.log_tail()}")
            assert net["cniVersion"] == "1.0.0"
            assert net["source"] == generated(conf_dir)
            assert net["source"]["plugins"][0]["clusterNetwork"] == str(primary)
            assert (bin_dir / "netctl-cni").exists()

            # the primary CNI edits its file: regenerated, and containerd reloads it
            primary.write_text(json.dumps({**BRIDGE[1], "cniVersion": "0.4.0"}))
            wait_for(lambda: default_network(ctd)["cniVersion"] == "0.4.0", 15,
                     "containerd to load the regenerated conf")
        finally:
            assert cmd.stop() == 0, cmd.lines
        assert default_network(ctd)["name"] == "netctl"  # stopping removed nothing

        assert Command(tmp_path, "--uninstall").wait() == 0
        wait_for(lambda: default_network(ctd)["name"] == BRIDGE[1]["name"], 15,
                 "containerd back on the primary after --uninstall")
