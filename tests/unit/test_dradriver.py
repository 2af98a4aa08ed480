"""We test the kit's DRA driver (``netctl/kit/dradriver.py``) with the test playing the
kubelet over its real sockets, against the fake API server:

- registration: the socket appears in ``plugins_registry``; ``GetInfo`` answers type
  ``DRAPlugin``, the driver's name, the DRA socket as the kubelet names it and
  ``v1.DRAPlugin``; the slice is published only once ``NotifyRegistrationStatus`` said
  registered; a refusal is an error naming it;
- ``NodePrepareResources``: the driver's devices of an allocated claim (its other drivers'
  devices left out), an error for a claim whose uid is not the API's or that holds none of
  its devices; ``NodeUnprepareResources`` forgets them;
- leaving: the slice deleted, the sockets removed.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from netctl_kit import protoencode
from netctl_kit.devices import unix_call
from netctl_kit.dradriver import (
    DRA_SERVICE,
    REGISTRATION_SERVICE,
    DraDriver,
    DraDriverError,
    claims_request,
    read_prepare_answer,
)
from netctl_kit.harness import wait_for
from netctl_kit.kubefake import FakeKube, claim_allocation, resource_claim

from netctl.devices import proto

DRIVER, NODE = "vf.netctl.test", "node-a"
DEVICES = {"vf0": ("netctl.test/vf", "hostvf0"), "vf1": ("netctl.test/vf", "hostvf1")}


@pytest.fixture
def kubelet_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="dra"))  # short: unix socket paths
    yield d
    shutil.rmtree(d)


def play_kubelet(socket: Path, registered: bool, seen: dict[str, object]) -> threading.Thread:
    """The kubelet's plugin watcher: once the registration socket is there, GetInfo, then
    NotifyRegistrationStatus."""
    def run() -> None:
        wait_for(socket.exists, 10, "the registration socket")
        info = proto.decode(unix_call(socket, f"/{REGISTRATION_SERVICE}/GetInfo", b""))
        seen["info"] = (proto.text(info, 1), proto.text(info, 2), proto.text(info, 3),
                        proto.texts(info, 4))
        status = protoencode.encode([(1, registered), (2, "" if registered else "no, thanks")])
        unix_call(socket, f"/{REGISTRATION_SERVICE}/NotifyRegistrationStatus", status)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_registered_published_prepared_and_taken_back(kubelet_dir: Path) -> None:
    with FakeKube() as kube:
        kube.create("resourceclaims", resource_claim("c1", "default", "vf"))
        status = claim_allocation(DRIVER, NODE, ["vf1"], "vf", node=NODE)
        status["allocation"]["devices"]["results"].append(
            {"request": "gpu", "driver": "gpu.example.com", "pool": NODE, "device": "g0"})
        uid = kube.patch("resourceclaims", "default", "c1", {"status": status},
                         subresource="status")["metadata"]["uid"]
        kube.create("resourceclaims", resource_claim("c2", "default", "vf"))
        other = kube.get("resourceclaims", "default", "c2")["metadata"]["uid"]
        driver = DraDriver(DRIVER, NODE, DEVICES, kube, kubelet_dir)
        seen: dict[str, object] = {}
        kubelet = play_kubelet(driver.registration_socket, True, seen)
        with driver:
            kubelet.join()
            assert seen["info"] == ("DRAPlugin", DRIVER,
                                    f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock",
                                    ["v1.DRAPlugin"])
            assert driver.registration_socket == \
                kubelet_dir / "plugins_registry" / f"{DRIVER}-reg.sock"
            assert driver.calls == ["GetInfo", "NotifyRegistrationStatus"]
            (published,) = kube.list("resourceslices")
            assert published["spec"]["nodeName"] == NODE
            assert {d["name"]: d["attributes"]["k8s.cni.cncf.io/deviceID"]["string"]
                    for d in published["spec"]["devices"]} == {"vf0": "hostvf0",
                                                               "vf1": "hostvf1"}

            answer = read_prepare_answer(unix_call(
                driver.socket, f"/{DRA_SERVICE}/NodePrepareResources",
                claims_request([("default", uid, "c1"), ("default", "not-its-uid", "c1"),
                                ("default", other, "c2")])))
            assert answer[uid] == [("vf", NODE, "vf1")]
            assert "not found" in str(answer["not-its-uid"])
            assert "no device of driver" in str(answer[other])
            assert driver.prepared == {uid: ["vf1"]}
            unix_call(driver.socket, f"/{DRA_SERVICE}/NodeUnprepareResources",
                      claims_request([("default", uid, "c1")]))
            assert driver.prepared == {}
        assert kube.list("resourceslices") == []
        assert not driver.socket.exists() and not driver.registration_socket.exists()


def test_a_registration_the_kubelet_refuses_is_an_error(kubelet_dir: Path) -> None:
    with FakeKube() as kube:
        driver = DraDriver(DRIVER, NODE, DEVICES, kube, kubelet_dir)
        kubelet = play_kubelet(driver.registration_socket, False, {})
        with pytest.raises(DraDriverError) as refused:
            driver.open(timeout=10)
        kubelet.join()
        driver.close()
        assert "no, thanks" in str(refused.value)
        assert kube.list("resourceslices") == []  # nothing published
