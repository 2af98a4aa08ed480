"""We test that the podman harness's clean-up removes only what its run left: a CNI chain
of the run's networks goes, one another runtime made meanwhile stays (portmap's and
firewall's rules name their network in a comment)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from netctl_kit.harness_podman import HostSnapshot, cni_chains

pytestmark = pytest.mark.skipif(shutil.which("iptables") is None, reason="needs iptables")


def iptables(*args: str) -> None:
    subprocess.run(["iptables", "-w", "5", "-t", "nat", *args], check=True,
                   capture_output=True)


def test_the_clean_up_leaves_chains_another_runtime_made_meanwhile() -> None:
    before = HostSnapshot.take()
    mine, theirs = "CNI-DN-nctcleanupmine000000", "CNI-DN-nctcleanuptheirs0000"
    for chain, network in ((mine, "nct-cleanup-own"), (theirs, "someone-elses")):
        iptables("-N", chain)
        iptables("-A", chain, "-m", "comment", "--comment",
                 f'dnat name: "{network}" id: "abc"', "-j", "RETURN")
    try:
        assert before.restore(["nct-cleanup-own"]) == []
        left = cni_chains("nat")
        assert mine not in left and theirs in left
    finally:
        for chain in (mine, theirs):
            subprocess.run(["iptables", "-w", "5", "-t", "nat", "-F", chain], check=False,
                           capture_output=True)
            subprocess.run(["iptables", "-w", "5", "-t", "nat", "-X", chain], check=False,
                           capture_output=True)
