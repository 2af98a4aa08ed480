"""We test these aspects of ``netctl.cni.probe``: the pure parser of a VERSION answer
(versions listed; anything else is "unknown", the empty set); the refusal (code 1)
naming the plugin type, its path, the version asked for and what it supports, and no
refusal for an unknown plugin; real execs of Debian's bridge and host-local (up to
1.0.0, not 1.1.0) and of the test plugins in tests/plugins; plugins whose VERSION
fails, prints garbage, floods stdout or hangs are "unknown", quickly, and leave no
process behind; the probe's clean environment and stdin; the cache: one exec per
binary while its (realpath, mtime, size) is unchanged, shared by symlinks and by
concurrent askers, again after the binary changes, never for a missing one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from netctl.cni import probe, versions
from netctl.cni.probe import UNKNOWN, VersionProbe, check_delegate_version, parse_supported
from netctl.errors import INCOMPATIBLE_VERSION, CNIError
from tests.conftest import SYSTEM_CNI, TEST_PLUGINS, wait_for

UP_TO_1_0 = frozenset({"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"})
needs_plugins = pytest.mark.skipif(not os.path.exists(f"{SYSTEM_CNI}/bridge"),
                                   reason="needs containernetworking-plugins in /usr/lib/cni")


def ask(prober: VersionProbe, path: str | Path) -> frozenset[str]:
    async def main() -> frozenset[str]:
        return await prober.supported_versions(str(path))

    return trio.run(main)


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def counting_plugin(tmp_path: Path, name: str = "counted") -> tuple[Path, Path]:
    """A plugin that appends a line to a counter file on every run; (plugin, counter)."""
    counter = tmp_path / f"{name}.count"
    plugin = script(tmp_path / name, f"""echo run >> {counter}
cat >/dev/null
echo '{{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}}'
""")
    return plugin, counter


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed orphan is reaped by init later)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


# -- the pure parts ------------------------------------------------------------------------


@pytest.mark.parametrize(("out", "expected"), [
    (b'{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}',
     frozenset({"0.4.0", "1.0.0"})),
    (b'  {"supportedVersions": ["1.1.0"]}\n', frozenset({"1.1.0"})),
    (b"", UNKNOWN),
    (b"not json", UNKNOWN),
    (b'{"cniVersion": "1.0.0", "interfaces": [', UNKNOWN),
    (b'["1.0.0"]', UNKNOWN),
    (b'{"cniVersion":"1.0.0"}', UNKNOWN),
    (b'{"supportedVersions": "1.0.0"}', UNKNOWN),
    (b'{"supportedVersions": []}', UNKNOWN),
    (b'{"supportedVersions": ["1.0.0", 7]}', UNKNOWN),
    (b'{"supportedVersions": ["1.0.0", ""]}', UNKNOWN),
    (b'{"code": 4, "msg": "no"}', UNKNOWN),
])
def test_parse_supported(out: bytes, expected: frozenset[str]) -> None:
    assert parse_supported(out) == expected


def test_a_supported_version_passes() -> None:
    for version in ("0.3.1", "0.4.0", "1.0.0"):
        check_delegate_version("bridge", "/usr/lib/cni/bridge", version, UP_TO_1_0)


def test_an_unsupported_version_is_code_1_naming_plugin_path_and_versions() -> None:
    with pytest.raises(CNIError) as info:
        check_delegate_version("bridge", "/usr/lib/cni/bridge", "1.1.0", UP_TO_1_0)
    err = info.value
    assert err.code == INCOMPATIBLE_VERSION == 1
    assert "'bridge'" in err.msg and "/usr/lib/cni/bridge" in err.msg
    assert "1.1.0" in err.msg
    # What it supports, in version order (0.10.0 after 0.4.0, not before).
    assert "0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0" in err.msg
    with pytest.raises(CNIError) as info:
        check_delegate_version("x", "/p/x", "1.0.0", frozenset({"0.10.0", "0.4.0", "odd"}))
    assert info.value.msg.endswith("0.4.0, 0.10.0, odd")


def test_an_unknown_plugin_is_not_refused() -> None:
    check_delegate_version("garbage", "/p/garbage", "1.1.0", UNKNOWN)
    check_delegate_version("garbage", "/p/garbage", "9.9.9", frozenset())


# -- real plugins ------------------------------------------------------------------------------


@needs_plugins
@pytest.mark.parametrize("ptype", ["bridge", "host-local", "macvlan", "ptp"])
def test_debian_plugins_support_up_to_1_0_0_not_1_1_0(ptype: str) -> None:
    path = f"{SYSTEM_CNI}/{ptype}"
    supported = ask(VersionProbe(), path)
    assert supported == UP_TO_1_0, supported
    for version in versions.SUPPORTED:  # every version netctl serves
        if version == "1.1.0":
            with pytest.raises(CNIError) as info:
                check_delegate_version(ptype, path, version, supported)
            assert info.value.code == 1 and path in info.value.msg
        else:
            check_delegate_version(ptype, path, version, supported)


@pytest.mark.parametrize("ptype", sorted(p.name for p in TEST_PLUGINS.iterdir()))
def test_the_test_plugins_answer_version(ptype: str) -> None:
    newest = {"devmove": {"1.1.0"}}.get(ptype, set())  # it speaks what static speaks
    assert ask(VersionProbe(), TEST_PLUGINS / ptype) == \
        frozenset({"0.3.0", "0.3.1", "0.4.0", "1.0.0", *newest})


def test_the_module_level_probe_remembers(tmp_path: Path) -> None:
    plugin, counter = counting_plugin(tmp_path)

    async def main() -> list[frozenset[str]]:
        return [await probe.supported_versions(str(plugin)) for _ in range(3)]

    assert trio.run(main) == [frozenset({"0.4.0", "1.0.0"})] * 3
    assert runs(counter) == 1
    assert trio.run(main)[0] == frozenset({"0.4.0", "1.0.0"})  # a later run: still known
    assert runs(counter) == 1


# -- plugins whose VERSION is no use -----------------------------------------------------------


BAD_VERSION_PLUGINS = {
    "fails": "cat >/dev/null\necho '{\"code\": 4, \"msg\": \"no\"}'\nexit 1\n",
    "garbage": "cat >/dev/null\necho 'this is not JSON'\n",
    "no-list": "cat >/dev/null\necho '{\"cniVersion\":\"1.0.0\"}'\n",
    "killed": "kill -SEGV $$\n",
    "silent": "exit 0\n",
    "flood": "head -c 200000 /dev/zero | tr '\\0' '{'\n",
}


@pytest.mark.parametrize("kind", list(BAD_VERSION_PLUGINS))
def test_a_plugin_whose_version_is_no_use_is_unknown(tmp_path: Path, kind: str) -> None:
    plugin = script(tmp_path / kind, BAD_VERSION_PLUGINS[kind])
    prober = VersionProbe()
    assert ask(prober, plugin) == UNKNOWN
    check_delegate_version(kind, str(plugin), "1.1.0", UNKNOWN)  # not refused
    assert ask(prober, plugin) == UNKNOWN
    assert prober.execs == 1  # unknown is remembered too


def test_a_hanging_plugin_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    plugin = script(tmp_path / "hangs", f"sleep 300 &\necho $$ $! > {pids}\nwait\n")
    prober = VersionProbe(timeout=0.5)
    started = time.monotonic()
    assert ask(prober, plugin) == UNKNOWN
    assert time.monotonic() - started < 5
    for pid in map(int, pids.read_text().split()):  # the shell and its sleep
        wait_for(lambda pid=pid: not alive(pid), 5, f"process {pid} to die")


def test_missing_and_non_executable_binaries_are_unknown(tmp_path: Path) -> None:
    prober = VersionProbe()
    assert ask(prober, tmp_path / "nothing") == UNKNOWN
    text = tmp_path / "text"
    text.write_text("just text\n")
    assert ask(prober, text) == UNKNOWN  # exec fails: EACCES
    assert prober.execs == 1  # the missing one was not even tried
    assert prober.cached(str(tmp_path / "nothing")) is None


def test_the_probe_runs_with_a_clean_environment_and_the_latest_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file, stdin_file = tmp_path / "env", tmp_path / "stdin"
    plugin = script(tmp_path / "envdump", f"""env > {env_file}
cat > {stdin_file}
echo '{{"supportedVersions":["1.1.0"]}}'
""")
    monkeypatch.setenv("CNI_NETNS", "/var/run/netns/leaked")
    monkeypatch.setenv("NETCTL_LEAK", "yes")
    assert ask(VersionProbe(), plugin) == frozenset({"1.1.0"})
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert env["CNI_COMMAND"] == "VERSION"
    assert not {"CNI_NETNS", "CNI_CONTAINERID", "CNI_IFNAME", "NETCTL_LEAK"} & set(env)
    assert stdin_file.read_text() == '{"cniVersion":"1.1.0"}'


# -- the cache ---------------------------------------------------------------------------------


def test_one_exec_per_unchanged_binary_shared_by_symlinks(tmp_path: Path) -> None:
    plugin, counter = counting_plugin(tmp_path)
    link = tmp_path / "alias"
    link.symlink_to(plugin)
    prober = VersionProbe()
    for path in (plugin, plugin, link, plugin, link):
        assert ask(prober, path) == frozenset({"0.4.0", "1.0.0"})
    assert runs(counter) == 1
    assert prober.execs == 1
    assert prober.cached(str(link)) == frozenset({"0.4.0", "1.0.0"})


def test_a_changed_binary_is_asked_again(tmp_path: Path) -> None:
    plugin, counter = counting_plugin(tmp_path)
    prober = VersionProbe()
    ask(prober, plugin)
    # Same size, new mtime (an upgrade that happens to keep the size).
    st = plugin.stat()
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert prober.cached(str(plugin)) is None
    ask(prober, plugin)
    assert runs(counter) == 2
    # New content and size, same mtime: asked again, and the new answer is the one kept.
    mtime = plugin.stat().st_mtime_ns
    script(plugin, f"echo run >> {counter}\ncat >/dev/null\n"
                   "echo '{\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}'\n")
    os.utime(plugin, ns=(mtime, mtime))
    assert ask(prober, plugin) == frozenset({"1.0.0", "1.1.0"})
    assert ask(prober, plugin) == frozenset({"1.0.0", "1.1.0"})
    assert runs(counter) == 3


def test_concurrent_askers_share_one_exec(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    plugin = script(tmp_path / "slowish", f"""echo run >> {counter}
cat >/dev/null
sleep 0.3
echo '{{"supportedVersions":["1.0.0"]}}'
""")
    prober = VersionProbe()
    answers: list[frozenset[str]] = []

    async def main() -> None:
        async def one() -> None:
            answers.append(await prober.supported_versions(str(plugin)))

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(one)

    trio.run(main)
    assert answers == [frozenset({"1.0.0"})] * 8
    assert runs(counter) == 1


def test_a_cancelled_asker_leaves_no_process_and_the_next_asks_again(tmp_path: Path) -> None:
    pids, counter = tmp_path / "pids", tmp_path / "count"
    plugin = script(tmp_path / "slow", f"""echo run >> {counter}
echo $$ >> {pids}
cat >/dev/null
[ -e {pids}.again ] || {{ touch {pids}.again; sleep 30; }}
echo '{{"supportedVersions":["1.0.0"]}}'
""")
    prober = VersionProbe()

    async def cancelled() -> None:
        with trio.move_on_after(0.3):
            await prober.supported_versions(str(plugin))

    trio.run(cancelled)
    assert runs(counter) == 1
    for pid in map(int, pids.read_text().split()):
        wait_for(lambda pid=pid: not alive(pid), 5, f"process {pid} to die")
    assert prober.cached(str(plugin)) is None  # nothing learnt, nothing remembered
    assert ask(prober, plugin) == frozenset({"1.0.0"})
    assert runs(counter) == 2
