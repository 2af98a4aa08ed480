"""We test how the Events on refused pods are counted (``netctl/kubeapi/events.py``'s pure
:class:`EventLog`), without an API server:

- the first refusal is a new Event named ``<pod>.<hex nanoseconds>``, count 1;
- a repeat (same pod, UID, reason and message) is the same Event, its count one higher,
  its firstTimestamp kept; it is patched once it is known to be in the API, created
  until then;
- another message, reason or pod UID is another Event;
- a repeat after ``ttl`` seconds of quiet starts a new Event;
- at most ``size`` Events are remembered, the least recently seen forgotten first;
- a name stays a DNS subdomain of at most 253 characters.
"""

from __future__ import annotations

import re

from netctl.cni.request import Pod
from netctl.kubeapi.events import EventLog, Key, event_name

SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND  # 2023-11-14T22:13:20Z
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def key(message: str = "bad annotation", uid: str = "u1", reason: str = "InvalidNetworks",
        pod: str = "web-0") -> Key:
    return Key(Pod(namespace="default", name=pod, uid=uid), reason, message)


def test_a_repeat_counts_on_the_same_event() -> None:
    log = EventLog()
    first = log.observe(key(), T0, 100.0)
    assert first.name == f"web-0.{T0:x}" and first.count == 1 and not first.known
    assert first.first == first.last == "2023-11-14T22:13:20Z"

    # not written yet (the create failed): the next one is created, under the same name
    again = log.observe(key(), T0 + 5 * SECOND, 105.0)
    assert (again.name, again.count, again.known) == (first.name, 2, False)
    log.written(key(), again.name)

    third = log.observe(key(), T0 + 65 * SECOND, 165.0)
    assert (third.name, third.count, third.known) == (first.name, 3, True)
    assert third.first == "2023-11-14T22:13:20Z" and third.last == "2023-11-14T22:14:25Z"
    assert len(log) == 1


def test_another_message_reason_or_pod_is_another_event() -> None:
    log = EventLog()
    names = {log.observe(k, T0 + i, 100.0).name
             for i, k in enumerate([key(), key(message="NAD default/red not found"),
                                    key(reason="NoNetworkFound"), key(uid="u2")])}
    assert len(names) == 4 and len(log) == 4
    assert log.observe(key(), T0 + 10, 101.0).count == 2


def test_a_repeat_after_the_ttl_is_a_new_event() -> None:
    log = EventLog(ttl=600.0)
    first = log.observe(key(), T0, 100.0)
    log.written(key(), first.name)
    kept = log.observe(key(), T0 + 590 * SECOND, 690.0)  # within 600 s of the last one
    assert (kept.name, kept.count) == (first.name, 2)
    later = log.observe(key(), T0 + 1200 * SECOND, 1290.1)  # 600.1 s of quiet
    assert later.name != first.name and later.count == 1 and not later.known
    assert later.first == later.last == "2023-11-14T22:33:20Z"


def test_the_least_recently_seen_is_forgotten_first() -> None:
    log = EventLog(size=2)
    a = log.observe(key("a"), T0, 1.0)
    log.observe(key("b"), T0 + 1, 2.0)
    log.observe(key("a"), T0 + 2, 3.0)  # a seen again: b is now the oldest
    log.observe(key("c"), T0 + 3, 4.0)  # b forgotten
    assert len(log) == 2
    again = log.observe(key("a"), T0 + 4, 5.0)  # a kept: its third
    assert (again.name, again.count) == (a.name, 3)
    assert log.observe(key("b"), T0 + 5, 6.0).count == 1  # b: a new Event; c forgotten
    assert log.observe(key("c"), T0 + 6, 7.0).count == 1


def test_written_names_only_the_event_still_remembered() -> None:
    log = EventLog(ttl=10.0)
    old = log.observe(key(), T0, 0.0)
    new = log.observe(key(), T0 + 20 * SECOND, 20.0)  # after the ttl: another Event
    log.written(key(), old.name)  # the old create's answer, late: not the new Event's
    assert not log.observe(key(), T0 + 21 * SECOND, 21.0).known
    log.written(key(), new.name)
    assert log.observe(key(), T0 + 22 * SECOND, 22.0).known


def test_names_are_dns_subdomains() -> None:
    assert event_name("web-0", 255) == "web-0.ff"
    for pod in ("a" * 253, "a" * 235 + "-" + "b" * 17, "x.y"):
        name = event_name(pod, T0)
        assert len(name) <= 253 and SUBDOMAIN.match(name), name
