"""The shape of the product, measured: ``python -m netctl_kit.anatomy``.

``sizes``: lines of the product (``netctl/`` without the kit) and of the kit, the longest
functions and the biggest classes of the product (by source lines, from the AST).

``path``: the modules one CNI ADD and its DEL pass through, from the socket to the journal. A
real daemon (standalone, one bridge + host-local network) runs under a profiler
(``sys.setprofile``) that records, from the moment the server starts reading a request until
its answer is built, every call into a netctl module and the module it came from; an ADD
and a DEL are then sent through the real thin plugin. Reported: the modules reached from
the server, the distinct cross-module calls among them, and the calls that climb back up
the layers of pyproject's import-linter contract (a lower layer calling into a higher one:
a callback). Only the request's own task and the tasks it starts (its chains) count: the
daemon's other tasks (the netlink watch, the reconciler's rounds, timers) are left out.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import sys
import tempfile
import tomllib
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KIT = "netctl/kit/"


def sizes(root: Path = ROOT, top: int = 5) -> dict[str, Any]:
    product = kit = 0
    funcs: list[tuple[int, str]] = []
    classes: list[tuple[int, str]] = []
    for path in sorted((root / "netctl").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        lines = len(text.splitlines())
        if rel.startswith(KIT):
            kit += lines
            continue
        product += lines
        for node in ast.walk(ast.parse(text)):
            span = (node.end_lineno or node.lineno) - node.lineno + 1 \
                if isinstance(node, ast.stmt) else 0
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                funcs.append((span, f"{rel}:{node.name}"))
            elif isinstance(node, ast.ClassDef):
                classes.append((span, f"{rel}:{node.name}"))
    funcs.sort(reverse=True)
    classes.sort(reverse=True)
    return {"product_lines": product, "kit_lines": kit,
            "longest_functions": funcs[:top], "biggest_classes": classes[:top]}


# -- the path of a request ---------------------------------------------------------------


def _profile(out: str, argv: list[str]) -> int:
    """Run ``netctl daemon …`` (``argv``) in this process under the recording profiler."""
    import trio

    windows: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    request: Any = None  # the trio task serving the request
    started: set[Any] = set()  # the _respond frames seen (a few: kept)

    def module(frame: Any) -> str:
        return str(frame.f_globals.get("__name__", ""))

    def of_request(task: Any) -> bool:
        """``task`` is the request's, or one it started (its chains): not a timer's."""
        while task is not None:
            if task is request:
                return True
            nursery = task.parent_nursery
            task = nursery.parent_task if nursery is not None else None
        return False

    def record(frame: Any, event: str, arg: Any) -> None:
        nonlocal current, request
        name = module(frame)
        if not name.startswith("netctl"):
            return
        code = frame.f_code.co_name
        if event == "return":
            # a coroutine's last return carries its value; a suspension carries None
            if current is not None and code == "_respond" and name == "netctl.daemon.server" \
                    and type(arg).__name__ == "Response":
                windows.append(current)
                current = request = None
                Path(out).write_text(json.dumps(windows))
            return
        if event != "call":
            return
        try:
            task = trio.lowlevel.current_task()
        except RuntimeError:  # not in trio: a thread
            return
        if code == "_respond" and name == "netctl.daemon.server" and frame not in started:
            # a new request (a connection that sends none never answers: dropped here)
            started.add(frame)
            current, request = {"edges": []}, task
        if current is None:
            return
        if not of_request(task):
            return
        back = frame.f_back
        while back is not None and not module(back).startswith("netctl"):
            back = back.f_back  # through trio's runner: the netctl frame that led here
        if back is not None and module(back) != name:
            edge = [module(back), name]
            if edge not in current["edges"]:
                current["edges"].append(edge)

    sys.setprofile(record)
    from netctl.commands.cli import main

    return main(argv)


def _layers(root: Path = ROOT) -> list[list[str]]:
    conf = tomllib.loads((root / "pyproject.toml").read_text())
    for contract in conf["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "layers":
            return [[n.strip() for n in line.replace("|", ":").split(":")]
                    for line in contract["layers"]]
    raise SystemExit("pyproject.toml has no layers contract")


def _layer(module: str, layers: list[list[str]]) -> int:
    best = (len(layers), 0)
    for i, names in enumerate(layers):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > best[1]:
                best = (i, len(n))
    return best[0]


def summarize(edges: list[list[str]], layers: list[list[str]]) -> dict[str, Any]:
    """What is reachable from the server over ``edges``: modules, calls, climbs."""
    # a call whose nearest netctl caller is the CLI's trio.run is a task's first frame: its
    # parent is not on the stack, so it is no edge; the task is counted when reached
    calls = [(a, b) for a, b in edges if a != "netctl.commands.cli"]
    reached = {"netctl.daemon.server"}
    grew = True
    while grew:
        grew = False
        for a, b in calls:
            if a in reached and b not in reached:
                reached.add(b)
                grew = True
    calls = [(a, b) for a, b in calls if a in reached]
    up = [f"{a} -> {b}" for a, b in calls if _layer(b, layers) < _layer(a, layers)]
    return {"modules": sorted(reached), "calls": len(calls), "climbs": up,
            "edges": [f"{a} -> {b}" for a, b in calls]}


def path(plugin: str | None = None) -> dict[str, Any]:
    from netctl_kit import harness as h

    work = Path(tempfile.mkdtemp(prefix="netctl-anatomy-"))
    out = work / "trace.json"
    daemon = h.Daemon(root=work, prefix="nanat",
                      launcher=[sys.executable, "-m", "netctl_kit.anatomy", "_profile", str(out),
                                "--"])
    daemon.install_plugin(plugin)
    ns = daemon.name("ns")
    bridge = daemon.name("br")
    h.netns_add(ns)
    try:
        daemon.add_network("anat", h.bridge_conf("anat", bridge,
                                                 h.host_local("10.99.77.0/24", daemon.ipam_dir)))
        daemon.start()
        container = uuid.uuid4().hex
        for verb in ("ADD", "DEL"):
            res = daemon.cni(verb, container, ns, daemon.conf("anat"), pod="default/anatomy")
            if res.rc != 0:
                raise SystemExit(f"{verb} failed: {res.describe()}")
    finally:
        daemon.shut_down()  # the trace is written as the daemon exits
        h.netns_del(ns)
        h.remove_host_objects("nanat", [bridge])
    try:
        windows = json.loads(out.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    layers = _layers()
    return {verb: summarize(w["edges"], layers) for verb, w in zip(("ADD", "DEL"), windows,
                                                                     strict=True)}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["_profile"]:
        rest = args[args.index("--") + 1:]
        return _profile(args[1], rest[rest.index("daemon"):])
    p = argparse.ArgumentParser(prog="python -m netctl_kit.anatomy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["sizes", "path"])
    p.add_argument("--plugin-binary", help="the thin plugin (default: the build's)")
    ns = p.parse_args(args)
    result = sizes() if ns.what == "sizes" else path(ns.plugin_binary)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
