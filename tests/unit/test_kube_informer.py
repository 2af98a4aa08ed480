"""We test the kube client's watched caches against the fake API server over real HTTP,
through kubernetes-asyncio and trio-asyncio: list then watch with a field selector,
objects that arrive later, a dropped stream resumed without a relist, a compacted history
(410) relisted, an outage ridden out with a pod deleted meanwhile reported as deleted,
a request counter that shows no GET or LIST per lookup, an unreachable API server
as an :class:`ApiError` with status 0, a pod lookup's wait ended by any call that
finds the server unreachable, and a NAD lookup before the first list waiting for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
import trio_asyncio
from netctl_kit.kubefake import FakeKube, nad, node, pod

from netctl.errors import CNIError, NotListedYet
from netctl.kubeapi.api import Api, ApiError, KubeSettings
from netctl.kubeapi.informer import Informer, Pod
from netctl.kubeapi.objects import NETWORKS
from netctl.kubeapi.pods import NadSource, PodSource


async def _wait(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(timeout):
        while not cond():  # noqa: ASYNC110 - the condition is the informer's state
            await trio.sleep(0.01)


def test_the_pod_cache_follows_the_api_through_drops_compaction_and_an_outage(
        tmp_path: Path) -> None:
    with FakeKube(bookmark_interval=0.2) as fake:
        config = fake.kubeconfig(tmp_path / "kubeconfig")
        fake.create("pods", pod("a", node="n1"))
        fake.create("pods", pod("other", node="n2"))

        async def main() -> None:
            async with trio_asyncio.open_loop():
                api = await Api.connect(KubeSettings(kubeconfig=str(config)))
                deleted: list[str] = []
                pods = Informer(api, Pod, "/api/v1/pods",
                                [("fieldSelector", "spec.nodeName=n1")],
                                on_delete=lambda p: deleted.append(p.metadata.name))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pods.run)
                    await pods.synced.wait()
                    assert set(pods.cache) == {("default", "a")}
                    assert pods.cache["default", "a"].metadata.uid

                    fake.create("pods", pod("b", node="n1"))  # after the list: the watch
                    found = await pods.wait_for(("default", "b"), 10)
                    assert found is not None and found.spec.nodeName == "n1"

                    fake.drop_watches()  # a dropped stream resumes where it was
                    fake.create("pods", pod("c", node="n1"))
                    assert await pods.wait_for(("default", "c"), 10) is not None
                    fake.patch("pods", "default", "c",
                               {"metadata": {"annotations": {NETWORKS: "blue"}}})
                    await _wait(lambda: pods.cache["default", "c"].metadata.annotations
                                == {NETWORKS: "blue"})
                    fake.delete("pods", "default", "b")
                    await _wait(lambda: deleted == ["b"])
                    assert pods.lists == 1  # no relist so far

                    fake.stop()  # an outage: a pod is deleted meanwhile, history lost
                    await _wait(lambda: pods.state.startswith("retrying"))
                    fake.delete("pods", "default", "a")
                    fake.compact()
                    fake.start()
                    await _wait(lambda: deleted == ["b", "a"], 30)  # 410 → relist
                    assert pods.lists == 2 and set(pods.cache) == {("default", "c")}
                    assert pods.status()["synced"] is True

                    fake.reset_counts()
                    for _ in range(100):
                        assert await pods.wait_for(("default", "c"), 1) is not None
                    assert fake.count("get", "pods") == 0 and fake.count("list", "pods") == 0
                    nursery.cancel_scope.cancel()
                await api.close()

        trio.run(main)
        assert fake.server_errors == []


def test_an_unreachable_api_server_is_status_0(tmp_path: Path) -> None:
    with FakeKube() as fake:
        config = fake.kubeconfig(tmp_path / "kubeconfig")
        fake.stop()

        async def main() -> None:
            async with trio_asyncio.open_loop():
                api = await Api.connect(KubeSettings(kubeconfig=str(config), api_timeout=2))
                with pytest.raises(ApiError) as err:
                    await api.get("/api/v1/namespaces/default/pods/x")
                assert err.value.status == 0 and err.value.unreachable
                assert fake.url.removeprefix("http://") in str(err.value)
                await api.close()

        trio.run(main)


def test_a_pod_lookup_reads_the_cache_waits_for_the_watch_then_gets_once(
        tmp_path: Path) -> None:
    with FakeKube() as fake:
        config = fake.kubeconfig(tmp_path / "kubeconfig")
        fake.create("pods", pod("warm", node="n1"))

        async def main() -> None:
            async with trio_asyncio.open_loop():
                api = await Api.connect(KubeSettings(kubeconfig=str(config), api_timeout=2))
                source = PodSource(api, "n1", wait=0.5)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(source.informer.run)
                    await source.informer.synced.wait()
                    fake.reset_counts()
                    found = await source.lookup("default", "warm")  # the cache: no read
                    assert found is not None and found.metadata.name == "warm"
                    assert fake.count("get", "pods") == 0

                    async def create_once_waited_for() -> None:
                        await trio.testing.wait_all_tasks_blocked()  # the lookup waits
                        fake.create("pods", pod("late", node="n1"))
                    nursery.start_soon(create_once_waited_for)
                    assert await source.lookup("default", "late") is not None  # the watch
                    assert fake.count("get", "pods") == 0

                    assert await source.lookup("default", "nowhere") is None  # one GET: 404
                    assert fake.count("get", "pods") == 1

                    fake.stop()
                    with pytest.raises(CNIError) as err:
                        await source.lookup("default", "unseen")
                    assert err.value.code == 11 and "cannot be reached" in err.value.msg
                    assert await source.lookup("default", "warm") is not None  # cached
                    nursery.cancel_scope.cancel()
                await api.close()

        trio.run(main)


def test_a_pod_lookup_stops_waiting_once_a_call_finds_the_api_server_unreachable(
        tmp_path: Path) -> None:
    """``pod-wait`` is 60 s: a lookup of a pod the watch has not brought is waiting when
    another call (a GET whose answer never comes within ``api-timeout``) fails to reach
    the server; the wait ends there and the lookup makes its GET (404: no such pod) — had
    it waited ``pod-wait``, the 20 s deadline would fail the test. While that failure is
    the last word, a lookup does not wait at all; once a call is answered again, it does."""
    with FakeKube() as fake:
        config = fake.kubeconfig(tmp_path / "kubeconfig")
        fake.create("nodes", node("n1"))

        async def main() -> None:
            async with trio_asyncio.open_loop():
                api = await Api.connect(KubeSettings(kubeconfig=str(config), api_timeout=1))
                source = PodSource(api, "n1", wait=60)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(source.informer.run)
                    await source.informer.synced.wait()

                    async def a_call_unanswered() -> None:
                        await trio.testing.wait_all_tasks_blocked()  # the lookup waits
                        with fake.answers_held("get", "nodes"), pytest.raises(ApiError):
                            await api.get("/api/v1/nodes/n1")
                    nursery.start_soon(a_call_unanswered)
                    fake.reset_counts()
                    with trio.fail_after(20):
                        assert await source.lookup("default", "unseen") is None
                    assert fake.count("get", "pods") == 1 and api.unreachable == ""
                    nursery.cancel_scope.cancel()
                await api.close()

        trio.run(main)
        assert fake.server_errors == []


def test_a_nad_lookup_before_the_first_list_waits_for_it(tmp_path: Path) -> None:
    """Before the first list of NADs a lookup raises :class:`NotListedYet` (code 11); a
    wait for the list ends when it is answered (its answer held meanwhile); a lookup
    after a wait in vain says the list has not come, and with the API server known
    unreachable there is no wait and the lookup names the server."""
    with FakeKube() as fake:
        config = fake.kubeconfig(tmp_path / "kubeconfig")
        fake.create("network-attachment-definitions", nad("blue", config={"type": "x"}))

        async def main() -> None:
            async with trio_asyncio.open_loop():
                api = await Api.connect(KubeSettings(kubeconfig=str(config), api_timeout=2))
                short, nads = NadSource(api, wait=0.2), NadSource(api, wait=60)
                listed = trio.Event()

                async def wait_listed() -> None:
                    with trio.fail_after(20):  # not the 60 s wait: the list came
                        await nads.wait_listed()
                    listed.set()

                async with trio.open_nursery() as nursery:
                    with fake.answers_held("list", "network-attachment-definitions"):
                        nursery.start_soon(short.informer.run)
                        nursery.start_soon(nads.informer.run)
                        await _wait(lambda: fake.held_answers == 2)
                        with pytest.raises(NotListedYet) as listing:
                            nads.get("default", "blue")
                        assert listing.value.code == 11
                        await short.wait_listed()  # 0.2 s, in vain
                        with pytest.raises(NotListedYet) as err:
                            short.get("default", "blue")
                        assert "default/blue" in err.value.msg and "has not come" in \
                            err.value.msg and "0.2 s" in err.value.msg, err.value.msg
                        nursery.start_soon(wait_listed)
                        await trio.testing.wait_all_tasks_blocked()
                        assert not listed.is_set()
                    await listed.wait()
                    assert nads.get("default", "blue") is not None
                    nursery.cancel_scope.cancel()

                fake.stop()
                down = NadSource(api, wait=60)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(down.informer.run)
                    await _wait(lambda: down.informer.state.startswith("retrying"))
                    with trio.fail_after(20):  # not the 60 s wait: known unreachable
                        await down.wait_listed()
                    with pytest.raises(NotListedYet) as err:
                        down.get("default", "blue")
                    assert "cannot be reached" in err.value.msg and fake.url in err.value.msg
                    nursery.cancel_scope.cancel()
                await api.close()

        trio.run(main)
