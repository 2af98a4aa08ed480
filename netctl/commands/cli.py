"""``netctl …``: the daemon and the admin commands."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import struct
import sys
from collections.abc import Callable
from typing import Any, Protocol

from netctl import (
    DEFAULT_CNI_CONF_DIR,
    DEFAULT_NETWORKS_DIR,
    DEFAULT_SOCKET,
    DEFAULT_STATE_DIR,
    logs,
)
from netctl.commands.journalview import render as render_journal
from netctl.commands.journalview import table, timed
from netctl.errors import CNIError
from netctl.journal.query import PAGE as JOURNAL_LIMIT


class Commands(Protocol):
    """What ``add_subparsers`` returns, as the command groups use it."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def _cmd_daemon(args: argparse.Namespace) -> int:
    from netctl import settings
    from netctl.daemon import run as daemon

    # every flag of `netctl daemon` is a setting; one not given (None) leaves it to the file
    overrides = {k: v for k, v in vars(args).items() if k not in ("cmd", "fn", "config")}
    cfg = settings.load_config(args.config, overrides)
    logs.configure(cfg.log_level, cfg.log_format)
    import trio  # only the daemon needs it: the read-only commands start faster

    trio.run(daemon.run, cfg)
    return 0


def _cmd_install_cni(args: argparse.Namespace) -> int:
    from netctl.cni import autoconfig
    from netctl.cni.install import InstallError, install, uninstall

    if args.python is not None:
        print("netctl install-cni: --python is gone: the plugin is a static executable now "
              "and runs no interpreter on the host; drop the option", file=sys.stderr)
        return 2
    if args.watch and (args.uninstall or not args.auto_config):
        print("netctl: --watch goes with --auto-config, not with --uninstall", file=sys.stderr)
        return 2
    if args.replace_multus and (args.uninstall or not args.auto_config):
        print("netctl: --replace-multus goes with --auto-config", file=sys.stderr)
        return 2
    if args.uninstall:
        if args.auto_config:  # a config taken over goes back first: one stays in front
            for path in autoconfig.restore_replaced(args.cni_conf_dir):
                print(f"restored {path}")
        removed = autoconfig.remove_conf(args.cni_conf_dir) if args.auto_config else []
        removed += uninstall(args.bin_dir)
        for path in removed:
            print(f"removed {path}")
        return 0
    try:
        written = install(args.bin_dir, args.plugin_binary)
    except InstallError as exc:
        print(f"netctl install-cni: {exc}; nothing installed in {args.bin_dir}",
              file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"netctl install-cni: cannot write the plugin into {args.bin_dir}: {exc}",
              file=sys.stderr)
        return 1
    for path in written:
        print(f"installed {path}", flush=True)
    if not args.auto_config:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop; never remove the conf
    return autoconfig.run(args.cni_conf_dir, args.socket, wait_timeout=args.wait_timeout,
                          watch=args.watch, say=lambda line: print(line, flush=True),
                          replace_multus=args.replace_multus)


def journal_filters(args: argparse.Namespace) -> Any:
    """``netctl journal``'s flags as :class:`netctl.journal.query.Filters` (the times read
    here, on the caller's side, with a note for a time without a zone)."""
    from netctl.journal import query

    at = query.read_time(args.at, local=args.local) if args.at else None
    since = query.read_time(args.since, local=args.local) if args.since else None
    return query.Filters(
        pod=query.pod_selector(args.pod, args.namespace), container=args.container,
        ip=args.ip, at=at.seconds if at else None, since=since.seconds if since else None,
        network=args.network, device=args.device, running=args.running, limit=args.limit,
        notes=tuple(f"{flag}: {t.note}" for flag, t in (("--at", at), ("--since", since))
                    if t is not None and t.note))


def _cmd_journal(args: argparse.Namespace) -> int:
    """One query (:func:`netctl.reconcile.readonly.journal`), printed whole with ``--json`` or
    rendered as tables from that same document."""
    from netctl.reconcile import readonly

    doc = readonly.journal(args.state_dir, journal_filters(args))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_journal(doc, args.local)
    return 0


def _print_journal(doc: dict[str, Any], local: bool) -> None:
    lines, notes = render_journal(doc, local=local)
    for note in notes:
        print(note, file=sys.stderr)
    print("\n".join(lines))


def _cmd_journal_rebuild(args: argparse.Namespace) -> int:
    """``netctl journal rebuild``: a broken journal kept aside, a new one built from its
    readable rows (netctl/journal/rebuild.py); refused while a process has it open."""
    from netctl.cni.hostroot import resolve
    from netctl.journal import query, rebuild
    from netctl.settings import load_config

    cfg = load_config(args.config, {})  # where the runtimes keep their netns and results
    state_dir = cfg.state_dir if args.config and args.state_dir == DEFAULT_STATE_DIR \
        else args.state_dir
    path = str(query.journal_path(state_dir))
    users = rebuild.holders(path)
    if users:
        print(f"netctl: journal {path} is open in process {', '.join(map(str, users))} "
              "(a running daemon): stop it first", file=sys.stderr)
        return 1
    # as the daemon reads them: the netns dirs mounted as they are and under host-root,
    # libcni's results under host-root
    netns_dirs = (*cfg.netns_dirs, *(resolve(cfg.host_root, d) for d in cfg.netns_dirs
                                     if cfg.host_root))
    report = rebuild.rebuild(path, force=args.force, netns_dirs=netns_dirs,
                             results_dir=resolve(cfg.host_root, cfg.cni_results_dir))
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not report.kept_aside:
        print(f"journal {path}: " + ("no such file" if not os.path.exists(path) else
                                     "passes its integrity check; nothing to rebuild "
                                     "(--force rebuilds it all the same)"))
    else:
        print(f"journal {path} rebuilt; the old one is kept as {report.kept_aside[0]}")
        for problem in report.problems[:5]:
            print(f"  found: {problem}")
        for table, n in report.copied.items():
            spans = report.broken_spans.get(table, 0)
            print(f"  {table}: {n} rows copied" + (
                f"; the read broke at {spans} broken page(s), whose rows are lost" if spans
                else ""))
        for table in report.unreadable:
            print(f"  {table}: not readable at all")
        for item in report.recovered:
            print(f"  {item['address']} in {item['netns']}: " + (
                f"held again for container {item['container'] or '(unknown)'} on "
                f"{item['ifname']} (named by {item['named_by']})"
                if item["kind"] == "recovered" else item["why"]))
        print("start netctl: its replay and first reconcile round settle the rest from what "
              "the node holds")
    return 0


def _cmd_journal_export(args: argparse.Namespace) -> int:
    """``netctl journal export``: the events of a time window (netctl/journal/events.py),
    written as they are read, one JSON object or CSV row each."""
    import csv

    import msgspec

    from netctl.journal import events, query

    conn = query.connect(args.state_dir)
    window = {flag: query.read_time(value) for flag, value in
              (("--since", args.since), ("--until", args.until)) if value}
    for flag, t in window.items():
        if t.note:
            print(f"netctl: {flag}: {t.note}", file=sys.stderr)
    since, until = (window[f].seconds if f in window else None for f in ("--since", "--until"))
    found = events.stream(conn, events.node_name(args.node), since, until)
    out = sys.stdout
    try:
        if args.format == "csv":
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(events.FIELDS)
            for event in found:
                writer.writerow(["" if event[k] is None else event[k] for k in events.FIELDS])
        else:
            encode = msgspec.json.Encoder().encode
            for event in found:
                out.write(encode(event).decode())
                out.write("\n")
        out.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    return 0


def _cmd_ipam(args: argparse.Namespace) -> int:
    """``netctl ipam pools|show POOL|leaks``: read-only, from the journal (daemon up or down)."""
    from netctl.journal import query

    conn = query.connect(args.state_dir)
    try:
        if args.ipam == "handback":
            return _ipam_handback(args, conn)
        _ipam_report(args, conn)
    finally:
        conn.close()
    return 0


def _ipam_handback(args: argparse.Namespace, conn: sqlite3.Connection) -> int:
    """``netctl ipam handback``: exit 0 when every address is in whereabouts' records
    (written now or already), 1 when one is held there by another owner or could not be
    written; recorded DELs not carried out yet are reported (they hold addresses too)."""
    import msgspec

    from netctl.journal import query
    from netctl.kubeapi.api import ApiError, KubeSettings
    from netctl.kubeapi.handback import Held, run_hand_back
    from netctl.reconcile.pending import pending_dir

    held = [Held(r["address"], r["pool_range"], r["network_name"],
                 r["scope"].startswith("network:"), r["container_id"], r["ifname"],
                 r["pod_namespace"], r["pod_name"]) for r in query.held_addresses(conn)]
    try:
        outcomes = run_hand_back(KubeSettings(args.kubeconfig, args.in_cluster), held,
                                 namespace=args.namespace, dry_run=args.dry_run)
    except ApiError as exc:
        print(f"netctl ipam handback: {exc}", file=sys.stderr)
        return 1
    recorded = pending_dir(args.socket)
    try:
        pending = sorted(n for n in os.listdir(recorded) if not n.startswith("."))
    except FileNotFoundError:
        pending = []
    rows = [msgspec.to_builtins(o) for o in outcomes]
    if args.json:
        print(json.dumps({"records": rows, "recorded_dels": pending}, indent=2))
    else:
        print(table(rows, ["address", "pod", "ifname", "record", "outcome", "detail"]))
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
        print(", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or
              "netctl holds no address")
        if pending:
            print(f"{len(pending)} DELs recorded in {recorded} while the daemon was down are "
                  "not carried out yet: start the daemon once (netctl daemon "
                  "--exit-after-replay) before uninstalling", file=sys.stderr)
    bad = {"conflict", "failed"}
    return 1 if any(o.outcome in bad for o in outcomes) else 0


def _ipam_report(args: argparse.Namespace, conn: sqlite3.Connection) -> None:
    from netctl.journal import query
    from netctl.reconcile import readonly

    alloc_cols = ["address", "container", "pod", "ifname", "since"]
    if args.ipam == "pools":
        doc = readonly.pools(args.state_dir)
        if args.json:
            print(json.dumps(doc, indent=2))
        else:
            print(pools_table(doc["pools"]))
    elif args.ipam == "show":
        known = {p["key"]: p for p in query.pools(conn)}
        by_key = args.pool in known
        keys = [args.pool] if by_key else query.network_pools(conn, args.pool)
        if not keys:
            raise query.UnknownPool(args.pool, list(known), "IPAM pool or network")
        shown: list[dict[str, Any]] = [{"pool": known[key], "allocations": query.pool_allocations(
            conn, key, include_released=args.all)} for key in keys]
        if args.json:  # a pool key: that pool; a network name: its pools (dual-stack: two)
            print(json.dumps(shown[0] if by_key else {"network": args.pool, "pools": shown},
                             indent=2))
            return
        for i, item in enumerate(shown):
            pool = item["pool"]
            print(("\n" if i else "") + f"pool {pool['key']}: range {pool['range']}, "
                  f"IPv{pool['family']}, size {pool['size']}, in use {pool['in_use']}, "
                  f"free {pool['free']}")
            print(table(timed(item["allocations"]),
                        alloc_cols + (["until"] if args.all else [])))
    else:
        doc = readonly.leaks(args.state_dir, args.grace)
        if args.json:
            print(json.dumps(doc, indent=2))
        else:
            print(leaks_table(doc["leaks"]))


POOL_COLUMNS = ["key", "range", "family", "size", "in_use", "reserved", "free", "blocks"]
LEAK_COLUMNS = ["pool", "address", "container", "pod", "ifname", "since", "reason", "detail"]


def pools_table(rows: list[dict[str, Any]], first: tuple[str, ...] = ()) -> str:
    """``netctl ipam pools`` as a table (``first``: columns before the pool's, ``node``)."""
    shown = [{**r, "blocks": " ".join(f"{n}:{c}" for n, c in r["blocks"].items()) or "-"}
             for r in rows]
    return table(shown, [*first, *POOL_COLUMNS])


def leaks_table(rows: list[dict[str, Any]], first: tuple[str, ...] = ()) -> str:
    """``netctl ipam leaks`` as a table."""
    return table(timed(rows), [*first, *LEAK_COLUMNS])


def admin_request(socket_path: str, timeout: float = 5.0, call: str = "status",
                  dry_run: bool = False, **fields: Any) -> dict[str, Any]:
    """One admin call over the daemon's socket (:func:`netctl.daemon.admin.call`)."""
    from netctl.daemon import admin

    req = admin.AdminRequest(call=call, dry_run=dry_run, **fields)  # type: ignore[arg-type]
    return admin.call(socket_path, req, timeout)


def _cmd_reconcile(args: argparse.Namespace) -> int:
    """Ask the daemon to reconcile (or only plan, with --dry-run); plan offline if it is down.
    One request: on a terminal a spinner runs while the daemon works."""
    from netctl.commands.console import waiting

    try:
        with waiting("planning" if args.dry_run else "reconciling (the daemon DELetes what "
                     "nothing owns)"):
            report = admin_request(args.socket, timeout=300, call="reconcile",
                                   dry_run=args.dry_run)
    except OSError as exc:
        if not args.dry_run:
            print(f"netctl: daemon not reachable at {args.socket} ({exc}); acting needs the "
                  "daemon (it serializes with the runtime's requests). --dry-run plans from "
                  "the journal alone.", file=sys.stderr)
            return 1
        from netctl.journal.query import existing_journal
        from netctl.reconcile.facts import gather
        from netctl.reconcile.plan import plan

        facts = gather(existing_journal(args.state_dir))
        report = {"dry_run": True, "offline": True,
                  "plan": plan(facts, args.grace).to_json(), "errors": []}
    if args.json:
        print(json.dumps(report, indent=2))
        return 1 if report["errors"] else 0
    found = report["plan"]
    verb = "would" if report["dry_run"] else "did"
    for key, what in (("attachments", "DEL attachment"), ("allocations", "release allocation"),
                      ("freed", "release the addresses of stuck attachment"),
                      ("links", "delete host link")):
        for item in found.get(key, []):
            ident = item.get("attachment") or item.get("allocation") or item.get("link")
            extra = item.get("container") or item.get("address") or ""
            print(f"{verb} {what} {ident} {extra}: {item['reason']}")
    if not any(found.values()):
        print("nothing to reconcile")
    for err in report["errors"]:
        print(f"error: {err}", file=sys.stderr)
    return 1 if report["errors"] else 0


def _doctor(conf_dir: str, networks_dir: str) -> list[Any]:
    from netctl.cni.confdir import read_conf_dir
    from netctl.engine.doctor import diagnose
    from netctl.engine.networks import NetworkDir

    return diagnose(read_conf_dir(conf_dir), NetworkDir(networks_dir), conf_dir)


def _cmd_doctor(args: argparse.Namespace) -> int:
    """Check the runtime's CNI config dir against the networks; non-zero on warnings."""
    findings = _doctor(args.cni_conf_dir, args.networks_dir)
    warnings = [f for f in findings if f.level == "warning"]
    if args.json:
        print(json.dumps({"cni_conf_dir": args.cni_conf_dir,
                          "networks_dir": args.networks_dir,
                          "findings": [f.to_json() for f in findings]}, indent=2))
    else:
        for f in findings:
            print(f"{f.level}: {f.message}")
        print(f"{len(warnings)} warning{'s' * (len(warnings) != 1)} in {args.cni_conf_dir}"
              f" (networks from {args.networks_dir})")
    return 1 if warnings else 0


# `netctl status` exit codes, by the state the daemon says (statusview.state_of)
STATUS_READY, STATUS_NOT_READY, STATUS_DOWN, STATUS_DEGRADED = 0, 1, 2, 3
STATUS_CODES = {"not ready": STATUS_NOT_READY, "down": STATUS_DOWN,
                "degraded": STATUS_DEGRADED}


def status_code(health: dict[str, Any], degraded_ok: bool = False) -> int:
    """The exit code of a status document; ``--degraded-ok`` makes degraded 0 (a probe)."""
    from netctl.commands.statusview import state_of

    state = state_of(health)
    return STATUS_READY if degraded_ok and state == "degraded" else \
        STATUS_CODES.get(state, STATUS_READY)


def _ask_daemon(args: argparse.Namespace, call: str, timeout: float, needs: str,
                **fields: Any) -> dict[str, Any] | None:
    """An admin call that only the daemon can serve (``needs`` says why); its document, or
    None when it is unreachable or refused (said on stderr; ``--json`` prints a refusal)."""
    try:
        report = admin_request(args.socket, timeout=timeout, call=call, **fields)
    except OSError as exc:
        print(f"netctl: daemon not reachable at {args.socket} ({exc}); {call} needs the "
              f"daemon{needs}", file=sys.stderr)
        return None
    if "msg" in report and "code" in report:  # refused: a CNI error document
        if args.json:
            print(json.dumps(report, indent=2))
        print(f"netctl {call}: {report['msg']} (code {report['code']})", file=sys.stderr)
        return None
    if args.json:
        print(json.dumps(report, indent=2))
    return report


def _cmd_forget(args: argparse.Namespace) -> int:
    """End a container's stuck attachments by hand, through the daemon (it serializes
    with the runtime's requests and owns the addresses): exit 0 forgotten, 1 refused or
    the daemon unreachable."""
    import pwd

    who = os.environ.get("SUDO_USER") or os.environ.get("USER") or \
        os.environ.get("LOGNAME") or pwd.getpwuid(os.getuid()).pw_name
    report = _ask_daemon(args, "forget", 60, " (it holds the addresses and serializes with "
                         "the runtime)", container=args.container, ifname=args.ifname or "",
                         network=args.network or "", force=args.force, who=who,
                         why=args.why or "")
    if report is None:
        return 1
    if args.json:
        return 0
    forced = " (forced: its netns still existed)" if report["forced"] else ""
    print(f"forgot {len(report['forgotten'])} attachments of container "
          f"{report['container']}{forced}; journaled as operation {report['operation']}")
    for row in report["forgotten"]:
        print(f"  attachment {row['attachment']}: {row['network']} as {row['ifname']} "
              f"({row['state']}, {row['failures']} failed DELs), released "
              f"{', '.join(row['addresses']) or 'no address'}")
    return 0


def _cmd_hotplug(args: argparse.Namespace) -> int:
    """Plug a network into a running container, or unplug one, through the daemon (it
    runs the delegates in the container's turn): exit 0 done, 1 refused or the daemon
    unreachable."""
    verb = args.cmd
    fields: dict[str, Any] = {"container": args.container, "ifname": args.ifname or "",
                              "network": args.network or ""}
    if verb == "attach":
        fields["ips"] = args.ip or []
    report = _ask_daemon(args, verb, 120, "", **fields)
    if report is None:
        return 1
    if not args.json:
        where = f"{report['network']} as {report['ifname']}"
        addrs = ", ".join(report["addresses"]) or "no address"
        if verb == "detach":
            print(f"detached {where} from container {report['container']} (released {addrs})")
        elif report["existing"]:
            print(f"{where} was already attached to container {report['container']} ({addrs})")
        else:
            print(f"attached {where} to container {report['container']}: {addrs}")
    return 0


# what reading the health over the socket raises when nothing answers: refused, missing,
# cut short, silent
HEALTH_UNREACHABLE = (OSError, ValueError, struct.error)


def down_health(socket_path: str, exc: BaseException) -> dict[str, Any]:
    """The health document of a daemon that did not answer on ``socket_path``."""
    return {"ready": False, "state": "down",
            "reasons": [f"the netctl daemon is not reachable at {socket_path}: {exc}"],
            "socket": socket_path}


def _cmd_status(args: argparse.Namespace) -> int:
    """The daemon's health over its socket: exit 0 ready, 1 not ready (the document's
    ``reasons`` say why), 2 down (no socket, or nothing answering on it), 3 degraded:
    ready, but attachments are stuck or a pool is nearly full (``degraded_reasons``)."""
    try:
        health = admin_request(args.socket, timeout=args.timeout)
    except HEALTH_UNREACHABLE as exc:
        down = down_health(args.socket, exc)
        if args.json:
            print(json.dumps(down, indent=2))
        else:
            print(f"netctl daemon not reachable at {args.socket}: {exc}", file=sys.stderr)
        return STATUS_DOWN
    # the doctor's warnings, when the runtime's conf dir is here (they do not fail status)
    warnings: list[str] = []
    if os.path.isdir(args.cni_conf_dir):
        networks_dir = str(health.get("networks_dir") or args.networks_dir)
        warnings = [f.message for f in _doctor(args.cni_conf_dir, networks_dir)
                    if f.level == "warning"]
    if args.json:
        print(json.dumps({**health, "warnings": warnings}, indent=2))
    else:
        from netctl.commands.statusview import render

        print("\n".join(render(health, warnings)))
    return STATUS_READY if args.live else status_code(health, args.degraded_ok)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one function per command group adds its commands."""
    parser = argparse.ArgumentParser(prog="netctl", description="node network controller")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for add in (_add_daemon, _add_install_cni, _add_journal, _add_status_doctor,
                _add_reconcile, _add_forget, _add_hotplug, _add_ipam, _add_cluster,
                *_plugged_groups()):
        add(sub)
    return parser


def _plugged_groups() -> list[Callable[[Commands], None]]:
    """The command groups installed packages add through the ``netctl.commands`` entry
    points (``netctl bench``, from the kit). A group whose module is absent (a node's image
    ships without the kit) is not offered. Loading one imports only its small parser module."""
    from importlib.metadata import entry_points

    groups = []
    for point in entry_points(group="netctl.commands"):
        try:
            groups.append(point.load())
        except ModuleNotFoundError as exc:  # the module itself, not something it imports
            if exc.name is None or not point.module.startswith(exc.name):
                raise
    return groups


def _add_daemon(sub: Commands) -> None:
    """``netctl daemon``: the per-node daemon, its settings as flags."""
    p = sub.add_parser("daemon", help="run the per-node daemon")
    p.add_argument("--config")
    p.add_argument("--state-dir")
    p.add_argument("--socket")
    p.add_argument("--cni-bin-dir")
    p.add_argument("--networks-dir")
    p.add_argument("--host-root", metavar="DIR", help="where the host's / is mounted when "
                   "the daemon runs in a container: delegates run chrooted into it and "
                   "host files are read there (default: none, run as is)")
    p.add_argument("--exit-after-replay", action="store_true", default=None, help="do the "
                   "start-up replay (unfinished operations, the DELs the plugin recorded "
                   "while the daemon was down), then exit without serving: for an uninstall")
    p.add_argument("--kubeconfig")
    p.add_argument("--in-cluster", action="store_true", default=None)
    p.add_argument("--node-name")
    p.add_argument("--metrics-addr")
    p.add_argument("--query-addr", metavar="HOST:PORT", help="Kubernetes mode: serve the "
                   "read-only queries of kubectl netctl here (callers checked with a "
                   "TokenReview and a SubjectAccessReview; default: off)")
    p.add_argument("--log-level", metavar="LEVEL[,LOGGER=LEVEL…]", help="netctl's level "
                   "(default info); other libraries stay at warning unless named, e.g. "
                   "debug,pyroute2=debug")
    p.add_argument("--log-format", choices=logs.FORMATS, help="one line per event: text "
                   "(default), json (one object per line) or logfmt")
    p.add_argument("--journal-log", action="store_true", default=None, help="also log every "
                   "operation and allocation change as it commits, one line each with the "
                   "fields of `netctl journal export` (for the cluster's log shipping)")
    p.set_defaults(fn=_cmd_daemon)


def _add_install_cni(sub: Commands) -> None:
    """``netctl install-cni``: the plugin into a CNI bin dir (or out of it), and the auto-config."""
    p = sub.add_parser("install-cni", help="install the thin plugin into a CNI bin dir (and "
                       "with --auto-config put netctl in front of the node's primary CNI)")
    p.add_argument("--bin-dir", default="/opt/cni/bin")
    p.add_argument("--plugin-binary", metavar="FILE", help="the plugin executable to install "
                   "(default: the checkout's build/plugin/netctl-cni, else "
                   "/usr/lib/netctl/netctl-cni)")
    p.add_argument("--python", help=argparse.SUPPRESS)  # gone: an error that says why
    p.add_argument("--cni-conf-dir", default=DEFAULT_CNI_CONF_DIR, metavar="DIR",
                   help="the runtime's CNI config dir (for --auto-config)")
    p.add_argument("--auto-config", action="store_true",
                   help="also write 00-netctl.conflist in front of the primary CNI config, "
                   "which becomes clusterNetwork; waits for one")
    p.add_argument("--socket", default=DEFAULT_SOCKET, help="the daemon's socket, written "
                   "into the generated conflist")
    p.add_argument("--wait-timeout", type=float, default=0, metavar="SECONDS",
                   help="give up waiting for a primary CNI config after this (0: never)")
    p.add_argument("--watch", action="store_true", help="keep running and regenerate "
                   "00-netctl.conflist when the conf dir changes")
    p.add_argument("--replace-multus", action="store_true", help="with --auto-config: take "
                   "the place of Multus' config in front (00-multus.conf): netctl's written "
                   "first, Multus' renamed away after it; --uninstall puts it back")
    p.add_argument("--uninstall", action="store_true", help="remove the plugin (and with "
                   "--auto-config 00-netctl.conflist) instead")
    p.set_defaults(fn=_cmd_install_cni)


def _add_journal(sub: Commands) -> None:
    """``netctl journal``: what the journal holds, filtered."""
    p = sub.add_parser("journal", help="who held what, when: attachments and operations")
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    _journal_flags(p)
    p.set_defaults(fn=_cmd_journal)
    jsub = p.add_subparsers(dest="journal_cmd", metavar="export|rebuild")
    e = jsub.add_parser("export", help="every operation and allocation change of a time "
                        "window, one self-contained line each (JSON lines or CSV), streamed")
    e.add_argument("--state-dir", default=argparse.SUPPRESS, help="as for `netctl journal`")
    e.add_argument("--since", metavar="DURATION|TIME", help="from this time on (default: "
                   "the oldest event): 30s, 5m, 2h, 1d ago, RFC 3339 (a time without a "
                   "zone is read as UTC) or UNIX seconds")
    e.add_argument("--until", metavar="DURATION|TIME", help="up to this time, excluded "
                   "(default: now and on)")
    e.add_argument("--format", choices=["jsonl", "csv"], default="jsonl",
                   help="jsonl: one JSON object per line (default); csv: a header row, then "
                   "one row per event")
    e.add_argument("--node", metavar="NAME", help="the node named in every line (default: "
                   "$NODE_NAME, else this host's name)")
    e.set_defaults(fn=_cmd_journal_export)
    r = jsub.add_parser("rebuild", help="a journal that fails its integrity check kept "
                        "aside, and a new one built from what can be read of it (the daemon "
                        "stopped)")
    r.add_argument("--state-dir", default=argparse.SUPPRESS, help="as for `netctl journal`")
    r.add_argument("--config", metavar="FILE", help="the daemon's config file: its state-dir "
                   "(unless --state-dir is given), netns-dirs and cni-results-dir, where the "
                   "live pods' addresses are read back from")
    r.add_argument("--force", action="store_true", help="rebuild a journal that passes its "
                   "check too")
    r.add_argument("--json", action="store_true")
    r.set_defaults(fn=_cmd_journal_rebuild)


def _journal_flags(p: argparse.ArgumentParser) -> None:
    """The filters of ``netctl journal``, here and across the cluster alike."""
    p.add_argument("--pod", metavar="[NS/]NAME", help="a pod; NAME alone: in any namespace; "
                   "NS/*: every pod of namespace NS")
    p.add_argument("--namespace", metavar="NS", help="every pod of a namespace (with --pod "
                   "NAME: that pod of it)")
    p.add_argument("--container", metavar="ID", help="a container id, or a unique prefix "
                   "of one (runtimes print 12 characters)")
    p.add_argument("--ip", metavar="ADDR")
    p.add_argument("--at", metavar="TIME", help="RFC 3339 (2026-11-25T23:41:07Z, …+01:00), "
                   "UNIX seconds, or a DURATION ago; a time without a zone is read as UTC "
                   "(with --local: local time)")
    p.add_argument("--since", metavar="DURATION|TIME", help="30s, 5m, 2h, 1d ago, or a TIME "
                   "as --at takes it")
    p.add_argument("--network", metavar="NAME")
    p.add_argument("--device", metavar="ID", help="the attachments that held this device "
                   "(a device network's: an SR-IOV VF's PCI address, …); with --at, at that "
                   "time")
    p.add_argument("--running", action="store_true",
                   help="only the operations still running (all of them) and the attachments "
                        "they touch")
    p.add_argument("--limit", type=int, default=JOURNAL_LIMIT, metavar="N",
                   help=f"the newest N attachments (default {JOURNAL_LIMIT}; 0: all)")
    p.add_argument("--local", action="store_true", help="print times in local time with its "
                   "offset (default: UTC, ending in Z), and read a --at/--since time without a "
                   "zone as local time")
    p.add_argument("--json", action="store_true")


def _add_status_doctor(sub: Commands) -> None:
    """``netctl status`` and ``netctl doctor``, both reading the runtime's CNI config dir."""
    conf_dirs = argparse.ArgumentParser(add_help=False)
    conf_dirs.add_argument("--cni-conf-dir", default=DEFAULT_CNI_CONF_DIR, metavar="DIR",
                           help="the runtime's CNI config dir")
    conf_dirs.add_argument("--networks-dir", default=DEFAULT_NETWORKS_DIR, metavar="DIR",
                           help="the daemon's networks dir")

    p = sub.add_parser("status", parents=[conf_dirs, _asks_daemon()], help="health of the "
                       "daemon, over its socket, and the doctor's warnings; exits 0 ready, 1 "
                       "not ready, 2 down, 3 degraded (ready, but attachments stuck or a pool "
                       "nearly full)")
    p.add_argument("--degraded-ok", action="store_true", help="exit 0 when degraded (a "
                   "readiness probe: a degraded daemon still serves)")
    p.add_argument("--live", action="store_true", help="exit 0 whenever the daemon answers, "
                   "ready or not, 2 when it does not (a liveness probe: restart only a "
                   "daemon that stopped answering)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for the answer (default 5): no answer is down")
    p.set_defaults(fn=_cmd_status)

    p = sub.add_parser("doctor", parents=[conf_dirs], help="check the runtime's CNI config "
                       "dir: capabilities the netctl-cni entry must declare, cniVersion")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_doctor)


def _add_reconcile(sub: Commands) -> None:
    """``netctl reconcile``: clean what nothing owns, or plan it."""
    p = sub.add_parser("reconcile", parents=[_asks_daemon()],
                       help="find and clean what nothing owns any more")
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    p.add_argument("--dry-run", action="store_true", help="only print the plan")
    p.add_argument("--grace", type=float, default=30.0,
                   help="offline --dry-run: allocations younger than this are kept")
    p.set_defaults(fn=_cmd_reconcile)


def _asks_daemon(container: bool = False) -> argparse.ArgumentParser:
    """The flags of a command that asks the daemon (and of one that names a container)."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--socket", default=DEFAULT_SOCKET)
    flags.add_argument("--json", action="store_true")
    if container:
        flags.add_argument("--container", required=True, metavar="ID",
                           help="the container (a unique prefix of its id)")
    return flags


def _add_forget(sub: Commands) -> None:
    """``netctl forget``: a container's stuck attachments ended by hand."""
    p = sub.add_parser("forget", parents=[_asks_daemon(container=True)], help="end a "
                       "container's stuck attachments by hand: no DEL run, their addresses "
                       "released, journaled with who and why")
    p.add_argument("--ifname", help="only the attachment on this interface")
    p.add_argument("--network", help="only the attachments of this network")
    p.add_argument("--why", help="the reason, kept in the journal")
    p.add_argument("--force", action="store_true",
                   help="forget even though the netns still exists (its interfaces may be "
                   "in use: their addresses can then be given to another pod)")
    p.set_defaults(fn=_cmd_forget)


def _add_hotplug(sub: Commands) -> None:
    """``netctl attach`` and ``netctl detach``: a network plugged into a running container."""
    p = sub.add_parser("attach", parents=[_asks_daemon(container=True)],
                       help="plug a network into a running container")
    p.add_argument("--network", required=True, metavar="NAME",
                   help="the network, as NETCTL_NETWORKS names it")
    p.add_argument("--ifname", metavar="IF", help="its interface (default: the first free netN)")
    p.add_argument("--ip", action="append", metavar="ADDR",
                   help="an address to ask for (repeat for several)")
    p.set_defaults(fn=_cmd_hotplug)
    p = sub.add_parser("detach", parents=[_asks_daemon(container=True)],
                       help="unplug a network from a running container")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--ifname", metavar="IF", help="the interface to unplug")
    which.add_argument("--network", metavar="NAME",
                       help="the network to unplug (when it is attached once)")
    p.set_defaults(fn=_cmd_hotplug)


def _add_ipam(sub: Commands) -> None:
    """``netctl ipam pools|show|leaks|handback``."""
    p = sub.add_parser("ipam", help="the central IPAM's pools, allocations and leaks")
    isub = p.add_subparsers(dest="ipam", required=True, metavar="WHAT")
    read = argparse.ArgumentParser(add_help=False)
    read.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    read.add_argument("--json", action="store_true")
    isub.add_parser("pools", parents=[read], help="every pool: size, in use, free")
    i = isub.add_parser("show", parents=[read], help="a pool's allocations")
    i.add_argument("pool", metavar="POOL|NETWORK", help="the pool's key, as `netctl ipam "
                   "pools` shows, or a network's name (all of its pools)")
    i.add_argument("--all", action="store_true", help="released allocations too (history)")
    i = isub.add_parser("leaks", parents=[read], help="live addresses nothing live holds: the "
                        "reconciler's plan")
    i.add_argument("--grace", type=float, default=0.0, help="leave out allocations younger "
                   "than this many seconds (the daemon's reconciler waits reconcile-grace)")
    i = isub.add_parser("handback", parents=[read], help="for a rollback: write the addresses "
                        "netctl holds into whereabouts' IPPools (and overlapping-range "
                        "reservations), so whereabouts sees them and releases them itself")
    i.add_argument("--to", choices=["whereabouts"], default="whereabouts")
    where = i.add_mutually_exclusive_group(required=True)
    where.add_argument("--kubeconfig", metavar="FILE")
    where.add_argument("--in-cluster", action="store_true")
    i.add_argument("--namespace", default="kube-system", help="whereabouts' namespace, where "
                   "its IPPools are (default kube-system)")
    i.add_argument("--socket", default=DEFAULT_SOCKET, help="the daemon's socket path: the "
                   "DELs recorded beside it and not carried out yet are reported")
    i.add_argument("--dry-run", action="store_true", help="say what would be written")
    p.set_defaults(fn=_cmd_ipam)


def _add_cluster(sub: Commands) -> None:
    """``netctl cluster journal|ipam pools|ipam leaks|status`` — ``kubectl netctl …``: the
    node questions asked of every node's daemon, with the user's kubeconfig."""
    p = sub.add_parser("cluster", help="the journal, pools, leaks and status of every node, "
                       "asked with your kubeconfig (kubectl netctl)")
    _cluster_commands(p.add_subparsers(dest="cluster", required=True, metavar="COMMAND"))


def _cluster_flags() -> argparse.ArgumentParser:
    """Where the daemons are and how to ask them."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--kubeconfig", metavar="FILE", help="default: $KUBECONFIG, else "
                       "~/.kube/config (its current context)")
    where.add_argument("--token", metavar="TOKEN", help="the bearer token to send (default: "
                       "the kubeconfig's)")
    where.add_argument("--netctl-namespace", default="kube-system", metavar="NS",
                       help="the DaemonSet's namespace (default kube-system)")
    where.add_argument("--selector", default="app.kubernetes.io/name=netctl", metavar="LABELS",
                       help="its pods' labels (default app.kubernetes.io/name=netctl)")
    where.add_argument("--query-port", type=int, default=9470, metavar="PORT",
                       help="the daemons' query-addr port (default 9470; a pod's "
                       "netctl.dev/query-addr annotation overrides it)")
    where.add_argument("--https", action="store_true", help="the daemons serve HTTPS "
                       "(query-tls-cert); verified against the system's CAs or --ca-file")
    where.add_argument("--ca-file", metavar="FILE", help="the CA of the daemons' serving "
                       "certificates (implies --https)")
    where.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                       help="how long each node (and the API server) gets to answer")
    return where


def _cluster_commands(csub: Commands) -> None:
    """The commands of ``netctl cluster`` (and of ``kubectl netctl``)."""
    where = _cluster_flags()
    j = csub.add_parser("journal", parents=[where], help="who held what, when, on any node")
    _journal_flags(j)
    i = csub.add_parser("ipam", help="every node's pools or leaks")
    isub = i.add_subparsers(dest="ipam", required=True, metavar="WHAT")
    isub.add_parser("pools", parents=[where], help="every node's pools").add_argument(
        "--json", action="store_true")
    lk = isub.add_parser("leaks", parents=[where], help="every node's leaks")
    lk.add_argument("--grace", type=float, default=0.0, help="leave out allocations younger "
                    "than this many seconds")
    lk.add_argument("--json", action="store_true")
    st = csub.add_parser("status", parents=[where], help="every node's daemon: ready, "
                         "degraded, why")
    st.add_argument("--json", action="store_true")
    for cmd in (j, lk, st, *isub.choices.values()):
        cmd.set_defaults(fn=_cmd_cluster)


def _cluster_options(args: argparse.Namespace) -> Any:
    import ssl

    from netctl.kube.clusterquery import Options

    tls = None
    if args.https or args.ca_file:
        tls = ssl.create_default_context(cafile=args.ca_file)
    return Options(args.kubeconfig, args.netctl_namespace, args.selector, args.query_port,
                   args.token or "", args.timeout, tls)


def _cmd_cluster(args: argparse.Namespace) -> int:
    """Ask every node, merge, print; exit 0 when every node answered, 1 when one did not
    (it is named, the others' answers printed) or none could be asked."""
    from netctl.kube import clusterquery as cq

    what = "journal" if args.cluster == "journal" else \
        args.ipam if args.cluster == "ipam" else "status"
    path, ip, at, notes = cq.PATHS[what], None, None, ()
    if what == "journal":
        f = journal_filters(args)
        path, ip, at, notes = f"{path}?{cq.journal_query(f)}", f.ip, f.at, f.notes
    elif what == "leaks":
        path += f"?grace={args.grace}"
    try:
        doc = cq.query(_cluster_options(args), what, path, ip=ip, at=at, notes=notes)
    except cq.ClusterError as exc:
        print(f"kubectl netctl: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(doc, indent=2))
    elif what == "journal":
        _print_journal(doc, args.local)
    elif what == "pools":
        print(pools_table(doc["pools"], ("node",)))
    elif what == "leaks":
        print(leaks_table(doc["leaks"], ("node",)))
    else:
        print(table([{**s, "reasons": "; ".join(s.get("reasons") or
                                                s.get("degraded_reasons") or []) or "-"}
                     for s in doc["statuses"]], ["node", "state", "ready", "degraded",
                                                 "reasons"]))
    problems = cq.incomplete(doc)
    for line in problems:
        print(f"kubectl netctl: {line}", file=sys.stderr)
    if what == "status" and any(not s.get("ready") or s.get("degraded")
                                for s in doc["statuses"]):
        return 1
    return 1 if problems else 0


def kubectl_main(argv: list[str] | None = None) -> int:
    """``kubectl-netctl``: ``kubectl netctl journal …`` is ``netctl cluster journal …``."""
    parser = argparse.ArgumentParser(prog="kubectl netctl", description="netctl's journal, "
                                     "pools, leaks and status across the cluster, asked of "
                                     "every node's daemon with your kubeconfig")
    _cluster_commands(parser.add_subparsers(dest="cluster", required=True, metavar="COMMAND"))
    return _run(parser.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    return _run(build_parser().parse_args(argv))


def _run(args: argparse.Namespace) -> int:
    try:
        code: int = args.fn(args)
    except CNIError as exc:
        print(f"netctl: {exc.msg}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError) as exc:
        print(f"netctl: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
