"""We test how the daemon runs one delegate (:func:`netctl.cni.invoke.run_plugin`, its
``Child``): real child processes, shell scripts standing in for plugins.

- the plugin gets its whole config on stdin, also one larger than a pipe holds;
- a result past the stdout cap is refused (code 103) and the plugin killed;
- stderr past its cap is kept as "(stderr over the cap)", the result still read;
- a plugin past its timeout is killed with the children it started (its process group),
  code 101;
- a cancelled plugin finishes within its grace and what it did is handed back; one that
  does not is killed;
- nothing is left running or unreaped after any of them.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import trio
from netctl_kit.harness import wait_for

from netctl.cni.invoke import (
    MAX_STDERR,
    MAX_STDOUT,
    Cancellation,
    PluginError,
    PluginOutput,
    run_plugin,
)
from netctl.errors import DELEGATE_BAD_OUTPUT, DELEGATE_TIMEOUT, INVALID_CONFIG, CNIError

RESULT = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
          "ips": [{"address": "10.1.2.3/24", "interface": 0}]}

# each plugin: a shell script; @PIDS@ (the test's file) gets the pid of each process it
# starts (the plugin's environment is the daemon's clean one: no variable can say where)
SCRIPTS = {
    # stdin's length, as a result's dns domain
    "echo": """n=$(wc -c)
printf '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[],'
printf '"dns":{"domain":"%s"}}' "$n"
""",
    "bigout": f"""cat >/dev/null; head -c {MAX_STDOUT + 4096} /dev/zero | tr '\\0' ' '
sleep 30
""",
    "bigerr": f"""cat >/dev/null; head -c {MAX_STDERR + 100} /dev/zero | tr '\\0' 'e' >&2
printf '%s' '{json.dumps(RESULT)}'
""",
    "forks": """cat >/dev/null; sleep 300 & echo $! >> @PIDS@; echo $$ >> @PIDS@; sleep 300
""",
    "graceful": """cat >/dev/null; echo $$ >> @PIDS@; sleep 0.3
printf '%s' '""" + json.dumps(RESULT) + """'
""",
    "stubborn": """cat >/dev/null; echo $$ >> @PIDS@; trap '' TERM; sleep 300
""",
}


@pytest.fixture
def bin_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "bin"
    d.mkdir()
    pids = tmp_path / "pids"
    pids.touch()
    for name, body in SCRIPTS.items():
        path = d / name
        path.write_text("#!/bin/sh\n" + body.replace("@PIDS@", str(pids)))
        path.chmod(0o755)
    try:
        yield d
    finally:
        for line in pids.read_text().split():
            try:
                os.kill(int(line), signal.SIGKILL)
            except OSError:
                pass


def alive(pid: int) -> bool:
    """Running, not a zombie nor gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def children() -> set[int]:
    """This process's children, running or not yet reaped (from /proc)."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == os.getpid():
                out.add(int(entry))
    return out


def started(tmp_path: Path) -> list[int]:
    return [int(p) for p in (tmp_path / "pids").read_text().split()]


async def cancelled_once_running(tmp_path: Path, plugin: Callable[[], Awaitable[object]]
                                 ) -> None:
    """Run ``plugin()``, cancelled as soon as the plugin has said it runs (its pid)."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            async def cancel_when_running() -> None:
                while not started(tmp_path):  # noqa: ASYNC110 - the plugin's own file
                    await trio.sleep(0.01)
                scope.cancel()

            nursery.start_soon(cancel_when_running)
            await plugin()


async def run(bin_dir: Path, ptype: str, config: bytes = b"{}", timeout: float = 60.0,
              cancel_grace: float = 5.0, cancellation: Cancellation | None = None
              ) -> PluginOutput:
    return await run_plugin([str(bin_dir)], ptype, "ADD", config, container_id="c1",
                            netns="/run/netns/x", ifname="eth0", timeout=timeout,
                            cancel_grace=cancel_grace, cancellation=cancellation)


def test_the_whole_config_on_stdin(bin_dir: Path) -> None:
    big = json.dumps({"cniVersion": "1.0.0", "pad": "x" * 200_000}).encode()

    async def main() -> None:
        for config in (b'{"cniVersion":"1.0.0"}', big):
            out = await run(bin_dir, "echo", config)
            assert out.result is not None
            length = out.result["dns"]["domain"]
            assert int(length) == len(config)

    trio.run(main)


def test_stdout_past_its_cap_is_refused_and_the_plugin_killed(bin_dir: Path) -> None:
    before = children()

    async def main() -> None:
        began = time.monotonic()
        with pytest.raises(PluginError) as err:
            await run(bin_dir, "bigout", timeout=60)
        assert err.value.code == DELEGATE_BAD_OUTPUT
        assert f"more than {MAX_STDOUT} bytes on stdout" in err.value.msg
        assert time.monotonic() - began < 30, "killed, not waited for (it sleeps 30 s)"

    trio.run(main)
    assert children() <= before, "a plugin left unreaped"


def test_stderr_past_its_cap_is_marked_and_the_result_read(bin_dir: Path) -> None:
    async def main() -> None:
        out = await run(bin_dir, "bigerr")
        assert out.result is not None and out.result["ips"][0]["address"] == "10.1.2.3/24"
        assert out.stderr == b"(stderr over the cap)"

    trio.run(main)


def test_a_timeout_kills_the_plugin_and_what_it_started(bin_dir: Path, tmp_path: Path
                                                        ) -> None:
    before = children()

    async def main() -> None:
        with pytest.raises(PluginError) as err:
            await run(bin_dir, "forks", timeout=0.5)
        assert err.value.code == DELEGATE_TIMEOUT and "was killed" in err.value.msg

    trio.run(main)
    assert children() <= before, "a plugin left unreaped"
    pids = started(tmp_path)
    assert len(pids) == 2
    wait_for(lambda: not any(alive(p) for p in pids), 5,
             "the plugin's process group to be gone with it")


def test_a_cancelled_plugin_finishes_within_its_grace(bin_dir: Path, tmp_path: Path) -> None:
    async def main() -> None:
        cancel = Cancellation()
        await cancelled_once_running(tmp_path, lambda: run(
            bin_dir, "graceful", cancel_grace=5, cancellation=cancel))
        assert cancel.fed and cancel.finished is not None
        done = cancel.finished.result
        assert done is not None and done["ips"][0]["address"] == "10.1.2.3/24"

    trio.run(main)


def test_a_cancelled_plugin_past_its_grace_is_killed(bin_dir: Path, tmp_path: Path) -> None:
    before = children()

    async def main() -> None:
        cancel = Cancellation()
        await cancelled_once_running(tmp_path, lambda: run(
            bin_dir, "stubborn", cancel_grace=0.3, cancellation=cancel))
        assert cancel.fed and cancel.finished is None
        assert "still running after 0.3s of grace, killed" in cancel.describe(0.3)

    trio.run(main)
    assert children() <= before, "a plugin left unreaped"
    (pid,) = started(tmp_path)
    assert not alive(pid)


def test_a_plugin_found_once_then_removed_or_replaced(bin_dir: Path, tmp_path: Path) -> None:
    """Its path is kept a moment once found; removed meanwhile, the next exec looks again
    and names it not found (code 7); put back as another script, that one runs."""
    async def main() -> None:
        out = await run(bin_dir, "echo", b"12345")
        assert out.result is not None and out.result["dns"] == {"domain": "5"}
        body = (bin_dir / "echo").read_text()
        (bin_dir / "echo").unlink()
        with pytest.raises(CNIError) as gone:
            await run(bin_dir, "echo", b"12345")
        assert gone.value.code == INVALID_CONFIG and "not found" in gone.value.msg
        (bin_dir / "echo").write_text(body.replace('"%s"', '"again %s"'))
        (bin_dir / "echo").chmod(0o755)
        out = await run(bin_dir, "echo", b"123")
        assert out.result is not None and out.result["dns"] == {"domain": "again 3"}

    trio.run(main)
