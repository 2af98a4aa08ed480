"""We test these aspects of Kubernetes mode's hot-plug decision (pure): a selection with an
interface matches the attachment of its network on that interface, one without the first
unmatched attachment of its network; unmatched selections are attached, unmatched
attachments detached (removed before replaced); an attribute change (ips, mac, cni-args)
is refused without the opt-in, detach + attach on the same interface with it; the
config's default networks and the cluster network are never the annotation's."""

from __future__ import annotations

from typing import Any

from netctl.cni.config import parse_chain
from netctl.cni.request import Pod
from netctl.engine.conf import NetctlConf
from netctl.engine.selection import Selection
from netctl.journal.records import Attachment
from netctl.kube.hotplug import annotations_own, changes, defaults_count, differences


def att(ifname: str, network: str, *, add_op: int = 1, default: bool = False,
        caps: dict[str, Any] | None = None, cni_args: dict[str, Any] | None = None,
        state: str = "attached") -> Attachment:
    chain = parse_chain({"cniVersion": "1.0.0", "name": network.split("/")[-1],
                         "type": "bridge"}, "test")
    return Attachment(container_id="c1", ifname=ifname, network=network, chain=chain,
                      is_default=default, pod=Pod(namespace="web", name="p"), add_op=add_op,
                      capability_args=caps or {}, cni_args=cni_args or {}, state=state)


def sel(name: str, interface: str | None = None, **kw: Any) -> Selection:
    return Selection(name=name, namespace="web", interface=interface, **kw)


def names(atts: list[Attachment]) -> list[str]:
    return [a.ifname for a in atts]


def test_nothing_changed_is_nothing_to_do() -> None:
    live = [att("net1", "web/blue"), att("data0", "web/green")]
    todo = changes([sel("blue"), sel("green", "data0")], live, replace=False)
    assert not todo and todo.refused == []


def test_added_and_removed_networks() -> None:
    live = [att("net1", "web/blue"), att("net2", "web/green")]
    todo = changes([sel("green"), sel("red"), sel("red", "r1")], live, replace=False)
    assert names(todo.detach) == ["net1"]
    assert todo.attach == [sel("red"), sel("red", "r1")]


def test_without_an_interface_the_first_unmatched_attachment_of_the_network() -> None:
    live = [att("net1", "web/blue"), att("b0", "web/blue"), att("net3", "web/blue")]
    # b0 is named: it is its selection's; the unnamed one takes net1; net3 is removed
    todo = changes([sel("blue"), sel("blue", "b0")], live, replace=False)
    assert names(todo.detach) == ["net3"] and todo.attach == []
    # a network removed by name alone (no interface in the annotation)
    todo = changes([sel("blue", "b0")], live, replace=False)
    assert names(todo.detach) == ["net1", "net3"]


def test_an_interface_of_another_network_is_a_remove_and_an_add() -> None:
    live = [att("data0", "web/blue")]
    todo = changes([sel("green", "data0")], live, replace=False)
    assert names(todo.detach) == ["data0"] and todo.attach == [sel("green", "data0")]


def test_an_attribute_change_is_refused_without_the_opt_in() -> None:
    live = [att("net1", "web/blue", caps={"ips": ["10.1.0.5/24"]}),
            att("net2", "web/green", cni_args={"vlan": 5})]
    wanted = [sel("blue", ips=["10.1.0.6/24"], mac="0a:00:00:00:00:01"),
              sel("green", cni_args={"vlan": 6})]
    todo = changes(wanted, live, replace=False)
    assert not todo
    assert len(todo.refused) == 2
    assert "web/blue on net1: its ips, mac changed" in todo.refused[0]
    assert "netctl.dev/hotplug-replace" in todo.refused[0]
    assert "web/green on net2: its cni-args changed" in todo.refused[1]


def test_an_attribute_change_with_the_opt_in_is_detach_and_attach_on_its_interface() -> None:
    live = [att("net1", "web/blue", caps={"ips": ["10.1.0.5/24"]}), att("net2", "web/red")]
    todo = changes([sel("blue", ips=["10.1.0.6/24"])], live, replace=True)
    assert names(todo.detach) == ["net2", "net1"]  # the removed first, then the replaced
    assert todo.attach == [sel("blue", "net1", ips=["10.1.0.6/24"])]
    assert todo.refused == []


def test_differences_name_the_annotations_keys() -> None:
    one = att("net1", "web/blue", caps={"infinibandGUID": "a"})
    assert differences(sel("blue", infiniband_guid="b"), one) == ["infiniband-guid"]
    assert differences(sel("blue"), att("net1", "web/blue")) == []


def test_the_cluster_network_and_the_configs_defaults_are_not_the_annotations() -> None:
    cluster = att("eth0", "kube-system/cluster", default=True)
    live = [cluster, att("net1", "kube-system/mon"), att("net2", "web/blue"),
            att("data0", "web/green", add_op=7),
            att("net3", "web/red", add_op=7), att("net4", "web/old", state="removing")]
    own = annotations_own(live, cluster, defaults=1)
    assert names(own) == ["net2", "data0", "net3"]
    # a hot-plugged net1 (another operation) is the annotation's, the ADD's net1 is not
    plugged = att("net1", "web/blue", add_op=9)
    assert names(annotations_own([cluster, plugged], cluster, defaults=1)) == ["net1"]


def test_defaults_count() -> None:
    conf = NetctlConf(cniVersion="1.0.0", name="n", clusterNetwork="c",
                      defaultNetworks=["mon", "log"])
    assert defaults_count(conf, skip_defaults=False) == 2
    assert defaults_count(conf, skip_defaults=True) == 0
    inline = NetctlConf(cniVersion="1.0.0", name="n", delegates=[{}, {}, {}])
    assert defaults_count(inline, skip_defaults=True) == 2
