"""We test these aspects of *degraded* (netctl/engine/degraded.py), without a daemon:
``pool-degraded-at`` is read as a fraction (or a percentage) and anything else is refused
saying what is expected; a pool counts as exhausted or nearly from exactly the threshold
(no float rounding lets one address slip), never with 0 (off) nor with an unknown size;
the reasons name each stuck attachment and each pool with its usage; the daemon config
validates the setting when it loads; ``netctl status`` exits 3 for degraded and 1 when
also not ready, and ``--degraded-ok`` turns degraded into 0 (a probe); the API's answers
get bounded code labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from netctl.commands.cli import STATUS_DEGRADED, STATUS_NOT_READY, STATUS_READY, status_code
from netctl.engine.degraded import (
    DEFAULT_POOL_DEGRADED_AT,
    full_pools,
    is_degraded,
    parse_threshold,
    pool_fills,
    reasons,
)
from netctl.errors import CNIError
from netctl.kubeapi.api import code_label
from netctl.settings import load_config


@pytest.mark.parametrize(("value", "at"), [(0.9, 0.9), ("0.75", 0.75), ("90%", 0.9), (1, 1.0),
                                           (0, 0.0), ("100%", 1.0)])
def test_threshold_read(value: object, at: float) -> None:
    assert parse_threshold(value) == pytest.approx(at)


@pytest.mark.parametrize(("value", "words"), [(1.5, r"between 0 \(off\) and 1"),
                                              (-0.1, "between 0"), ("ninety", "not a number"),
                                              (True, "not a number"), ("150%", "between")])
def test_threshold_refused(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_threshold(value)


def test_a_pool_is_full_from_exactly_the_threshold() -> None:
    # 0.7 * 10 is 7.000000000000001 in floats: 7 of 10 must still count
    assert [p.pool for p in full_pools({"a": (10, 7)}, 0.7)] == ["a"]
    assert full_pools({"a": (10, 6)}, 0.7) == []
    # 0.9 of a /29's 6 addresses is 5.4: degraded at 6
    assert full_pools({"tiny": (6, 5)}, 0.9) == []
    assert [(p.pool, p.used, p.size) for p in full_pools({"tiny": (6, 6)}, 0.9)] == [
        ("tiny", 6, 6)]
    assert full_pools({"tiny": (6, 6)}, 0) == []  # off
    assert full_pools({"unknown": (None, 40)}, 0.5) == []  # size not known since the start
    got = full_pools({"b": (10, 9), "a": (4, 4), "c": (100, 1)}, 0.9)
    assert [p.pool for p in got] == ["a", "b"]  # fullest first
    assert [p.pool for p in pool_fills({"b": (10, 1), "a": (None, 2)})] == ["b"]


def test_degraded_by_stuck_attachments_or_pools() -> None:
    assert not is_degraded(0, {"a": (10, 8)}, DEFAULT_POOL_DEGRADED_AT)
    assert is_degraded(1, {}, DEFAULT_POOL_DEGRADED_AT)
    assert is_degraded(0, {"a": (10, 9)}, DEFAULT_POOL_DEGRADED_AT)
    assert not is_degraded(0, {"a": (10, 10)}, 0)


def test_reasons_name_the_attachment_and_the_pool() -> None:
    stuck = [{"attachment": 7, "container": "c1", "network": "default/fd", "ifname": "net1",
              "failures": 3, "error": "faildel DEL failed"}]
    full = full_pools({"tiny/10.236.0.0/29": (6, 6), "big": (100, 91)}, 0.9)
    text = reasons(stuck, full, 0.9)
    assert text == [
        "attachment 7 of container c1 (default/fd net1) is stuck: its clean-up failed 3 "
        "times (faildel DEL failed); the reconciler retries it with back-off",
        "pool tiny/10.236.0.0/29 is exhausted: 6 of its 6 addresses taken (100%; "
        "pool-degraded-at 0.9); an ADD on it gets code 100 once none is left",
        "pool big is nearly exhausted: 91 of its 100 addresses taken (91%; "
        "pool-degraded-at 0.9); an ADD on it gets code 100 once none is left"]
    assert reasons([], [], 0.9) == []


def test_the_config_checks_the_threshold(tmp_path: Path) -> None:
    assert load_config(None, {}).pool_degraded_at == DEFAULT_POOL_DEGRADED_AT == 0.9
    conf = tmp_path / "d.yaml"
    conf.write_text("pool-degraded-at: 80%\n")
    assert load_config(str(conf), {}).pool_degraded_at == pytest.approx(0.8)
    conf.write_text("pool-degraded-at: 2\n")
    with pytest.raises(CNIError, match="pool-degraded-at: 2 is not between 0") as exc:
        load_config(str(conf), {})
    assert exc.value.code == 7


def test_status_exit_codes() -> None:
    assert status_code({"ready": True, "degraded": False}) == STATUS_READY == 0
    assert status_code({"ready": True, "degraded": True}) == STATUS_DEGRADED == 3
    assert status_code({"ready": True, "degraded": True}, degraded_ok=True) == 0
    assert status_code({"ready": False, "degraded": True}) == STATUS_NOT_READY == 1
    assert status_code({"ready": False, "degraded": True}, degraded_ok=True) == 1
    assert status_code({"ready": True}) == 0  # a daemon of an older version


def test_api_answer_codes_are_bounded() -> None:
    assert [code_label(s) for s in (200, 201, 204, 404, 409, 410, 0, 503, 418, 507, 302,
                                    999)] == [
        "2xx", "2xx", "2xx", "404", "409", "410", "0", "503", "4xx", "5xx", "3xx", "other"]
    assert len({code_label(s) for s in range(0, 1000)}) <= 20
