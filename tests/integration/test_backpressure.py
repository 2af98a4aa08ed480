"""We test these aspects: requests beyond ``max-concurrent`` wait; beyond ``max-queue``
an ADD is refused at once with code 11 while a DEL still waits its turn; the waiting
ones are served once capacity frees up. The long ADD comes from ``tests/plugins/slow``."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from netctl_kit import journaldb

from tests.conftest import NETCTL, Daemon, wait_for

pytestmark = pytest.mark.netns


def health(daemon: Daemon) -> dict[str, int]:
    out = subprocess.run([NETCTL, "status", "--socket", daemon.socket, "--json"],
                         capture_output=True, text=True, check=True).stdout
    data: dict[str, int] = json.loads(out)
    return data


def test_full_queue_refuses_add_with_code_11(daemon: Daemon, netns) -> None:
    daemon.settings.update({"max-concurrent": 1, "max-queue": 1})
    daemon.add_network("slowpoke", {"cniVersion": "1.0.0", "name": "slowpoke",
                                    "type": "slow", "sleep": 2})
    daemon.start()
    conf = daemon.conf("slowpoke")
    a, b, c = netns(), netns(), netns()
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(daemon.cni, "ADD", "bp-a", a, conf)
        wait_for(lambda: health(daemon)["in_flight"] == 1, what="the first ADD to run")
        second = pool.submit(daemon.cni, "ADD", "bp-b", b, conf)
        wait_for(lambda: health(daemon)["queued"] == 1, what="the second ADD to queue")

        refused = daemon.cni("ADD", "bp-c", c, conf)
        assert refused.rc == 1 and refused.out is not None, refused.stdout
        assert refused.out["code"] == 11, refused.out
        assert "busy" in refused.out["msg"] and "max_queue 1" in refused.out["msg"]

        # A DEL is never refused for a full queue: it waits and then succeeds.
        late_del = pool.submit(daemon.cni, "DEL", "bp-never-seen", c, conf)
        wait_for(lambda: health(daemon)["queued"] == 2, what="the DEL to queue")

        assert first.result().rc == 0, first.result().stdout
        assert second.result().rc == 0, second.result().stdout
        assert late_del.result().rc == 0, late_del.result().stdout

    ops = [(o["container_id"], o["verb"], o["state"])
           for o in daemon.read(journaldb.operation_rows)]
    assert ("bp-a", "ADD", "done") in ops and ("bp-b", "ADD", "done") in ops
    assert ("bp-never-seen", "DEL", "done") in ops
    assert not any(cid == "bp-c" for cid, _, _ in ops), "a refused ADD must not be journaled"
    assert health(daemon)["queued"] == 0
    for cid, ns in (("bp-a", a), ("bp-b", b)):
        assert daemon.cni("DEL", cid, ns, conf).rc == 0
