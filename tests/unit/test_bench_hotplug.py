"""We test these aspects of `netctl bench hotplug`'s summary, without a daemon: the latency
percentiles to the interface and to network-status, over all changes and adds and removes
apart, changes never seen left out of them and counted; the API requests per hot-plug; the
mean time of one read of the link; which interfaces a network-status names; and a link's
flags read through a socket."""

from __future__ import annotations

import socket
from collections import Counter

from netctl_kit.bench.hotplug import IFF_UP, Change, link_flags, status_names, summarize


def test_the_summary_of_the_changes() -> None:
    changes = [Change(True, 0.040, 0.100, 4, 0.012), Change(False, 0.020, 0.080, 2, 0.008),
               Change(True, 0.060, 0.140, 5, 0.015), Change(False, None, None, 100, 0.4)]
    out = summarize(changes, Counter({"patch pods": 4, "create events": 3, "patch events": 1}))
    assert (out["changes"], out["adds"], out["removes"], out["not_applied"]) == (4, 2, 2, 1)
    assert out["interface_ms"]["n"] == 3 and out["interface_ms"]["p50"] == 40.0
    assert out["interface_ms"]["max"] == 60.0 and out["status_ms"]["p50"] == 100.0
    assert out["add"]["interface_ms"]["p50"] == 50.0 and out["add"]["status_ms"]["p99"] == 139.6
    assert out["remove"]["interface_ms"] == {"p50": 20.0, "p95": 20.0, "p99": 20.0,
                                             "mean": 20.0, "max": 20.0, "n": 1}
    assert out["requests_per_hotplug"] == {"create events": 0.75, "patch events": 0.25,
                                           "patch pods": 1.0}
    assert out["total_requests_per_hotplug"] == 2.0
    assert out["link_poll_ms"] == round(435 / 111, 4)


def test_no_changes_is_a_summary_of_nothing() -> None:
    out = summarize([], Counter())
    assert out["changes"] == 0 and out["requests_per_hotplug"] == {}
    assert out["total_requests_per_hotplug"] == 0.0 and out["link_poll_ms"] == 0.0
    assert out["interface_ms"]["n"] == 0


def test_status_names() -> None:
    value = '[{"name": "a/c", "interface": "eth0"}, {"name": "a/b", "interface": "net1"}]'
    assert status_names(value) == {"eth0", "net1"}
    assert status_names(None) == set() and status_names("not json") == set()
    assert status_names('[{"name": "a/b"}, 3]') == {""}


def test_link_flags_read_through_a_socket_of_this_netns() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = link_flags(sock, "lo")
        assert flags is not None and flags & IFF_UP
        assert link_flags(sock, "no-such-link0") is None
