"""``kubectl netctl …`` (``netctl cluster …``): the node questions asked of the whole cluster
from a laptop, with the user's kubeconfig and under the cluster's RBAC.

The daemons are found as the DaemonSet's pods (:mod:`netctl.kubeapi.daemons`) and every node
is asked: an address's history may be in any node's journal (a block released and claimed
again, taken over, borrowed), and the API keeps none of it once the block object is gone;
for ``--ip`` the IPAMBlocks only name the node whose block holds the address, flagged when
it does not answer. They are asked concurrently (:func:`ask_all`) with the user's own
bearer token, and the answers merged (:func:`merge`, pure): every row with its ``node``, in
time order, and the nodes that did not answer, each with why — never left out.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlencode, urlsplit

import trio

from netctl.journal.query import Filters
from netctl.kube.queryserver import PATHS as PATHS
from netctl.kubeapi.http import Http, HttpError, endpoint_at

# what each question merges: the lists of rows, and the key that orders each
LISTS: dict[str, dict[str, str]] = {
    "journal": {"attachments": "since", "allocations": "since", "blocks": "since",
                "operations": "started_at"},
    "pools": {"pools": "key"},
    "leaks": {"leaks": "since"},
    "status": {},
}
# the key naming the node that answered a row: ``node``, but a block's row has its owner
# there already (the node whose journal saw it is ``seen_by``)
ORIGIN = {"blocks": "seen_by"}


@dataclass(frozen=True)
class Target:
    node: str
    host: str
    port: int


@dataclass(frozen=True)
class Answer:
    """One node's answer: ``doc`` (its document), or ``status`` and ``error``."""

    node: str
    doc: Mapping[str, Any] | None = None
    status: int = 0  # the HTTP status; 0: no answer (refused, timed out, unreachable)
    error: str = ""


def journal_query(f: Filters) -> str:
    """The query string of ``/v1/journal`` for ``f`` (times as UNIX seconds). Pure."""
    params: dict[str, Any] = {"pod": f.pod, "container": f.container, "ip": f.ip,
                              "at": f.at, "since": f.since, "network": f.network,
                              "device": f.device,
                              "running": "1" if f.running else None, "limit": f.limit}
    return urlencode({k: v for k, v in params.items() if v is not None})


def _order(value: Any) -> tuple[int, Any]:
    if isinstance(value, int | float):
        return 0, float(value)
    return (1, str(value)) if value is not None else (2, "")


def merge(what: str, answers: Iterable[Answer], *, notes: Iterable[str] = (),
          owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The answers of every node as one document of ``what`` (journal, pools, leaks,
    status). Pure.

    Rows carry ``node`` (a block's: ``seen_by``) and are ordered by time (then by node);
    ``nodes``: those that answered; ``unanswered``: ``{node, status, error}`` of the
    others; flags such as ``older_attachments`` are true when one node's are; ``notes``
    joined. ``status``: ``statuses``, one document per node with its ``node``. ``owners``
    (``--ip``): the blocks holding the address and their node, each with ``answered``."""
    answered, unanswered = [], []
    out: dict[str, Any] = {key: [] for key in LISTS[what]}
    flags: dict[str, bool] = {}
    all_notes = list(notes)
    statuses = []
    for a in sorted(answers, key=lambda a: a.node):
        if a.doc is None:
            unanswered.append({"node": a.node, "status": a.status, "error": a.error})
            continue
        answered.append(a.node)
        if what == "status":
            statuses.append({"node": a.node, **a.doc})
            continue
        for key in LISTS[what]:
            out[key] += [{**row, ORIGIN.get(key, "node"): a.node} for row in a.doc.get(key) or []]
        for key, value in a.doc.items():
            if isinstance(value, bool):
                flags[key] = flags.get(key, False) or value
        all_notes += [f"{a.node}: {n}" for n in a.doc.get("notes") or []
                      if n not in all_notes]
    for key, order in LISTS[what].items():
        origin = ORIGIN.get(key, "node")
        out[key].sort(key=lambda r, o=order, n=origin: (_order(r.get(o)), r[n]))
    if what == "status":
        out["statuses"] = statuses
    if what == "journal":
        out.update(flags)
        out["notes"] = all_notes
        if owners is not None:
            out["block_owners"] = [{**o, "answered": o["node"] in answered} for o in owners]
    out["nodes"] = answered
    out["unanswered"] = unanswered
    return out


def incomplete(doc: Mapping[str, Any]) -> list[str]:
    """What makes a merged answer incomplete, one line each: the nodes that did not answer
    or refused (401, 403: with why), and (``--ip``) a block owner among them. Pure."""
    lines = [f"node {u['node']} refused the query ({u['status']}): {u['error']}"
             if u["status"] else f"node {u['node']} did not answer: {u['error']}"
             for u in doc["unanswered"]]
    for o in doc.get("block_owners") or []:
        if o["node"] and not o["answered"]:
            lines.append(f"node {o['node']}, whose block {o['block']} holds the address, "
                         "did not answer: who held it may be missing")
    return lines


def _document(status: int, body: bytes) -> dict[str, Any]:
    """A node's answer's JSON object; ValueError when it is none."""
    try:
        doc = json.loads(body) if body else {}
    except ValueError:
        raise ValueError(f"HTTP {status}, not a JSON answer: {body[:60]!r}") from None
    if not isinstance(doc, dict):
        raise ValueError("the answer is not a JSON object")
    return doc


async def ask(target: Target, path: str, authorization: str, *, timeout: float,
              tls: ssl.SSLContext | None = None) -> Answer:
    """One GET of ``path`` to ``target``'s query endpoint; never raises: a failure is an
    :class:`Answer` without a document."""
    scheme = "https" if tls is not None else "http"
    host = f"[{target.host}]" if ":" in target.host else target.host
    http = Http(endpoint_at(urlsplit(f"{scheme}://{host}:{target.port}"), tls))
    try:
        got = await http.request("GET", path, {"Authorization": authorization,
                                               "Accept": "application/json"}, None, timeout)
        doc = _document(got.status, got.body)
    except (HttpError, ValueError) as exc:
        return Answer(target.node, error=str(exc))
    finally:
        await http.aclose()
    if got.status != 200 or not isinstance(doc.get("answer"), dict):
        why = doc.get("error") or f"HTTP {got.status}"
        return Answer(target.node, status=got.status, error=str(why))
    return Answer(target.node, doc["answer"], got.status)


async def ask_all(targets: Iterable[Target], path: str, authorization: str, *,
                  timeout: float, tls: ssl.SSLContext | None = None) -> list[Answer]:
    """:func:`ask` every target at once; one answer each, in no particular order."""
    answers: list[Answer] = []

    async def one(t: Target) -> None:
        answers.append(await ask(t, path, authorization, timeout=timeout, tls=tls))

    async with trio.open_nursery() as nursery:
        for t in targets:
            nursery.start_soon(one, t)
    return answers


class ClusterError(Exception):
    """The question could not be put to the nodes at all (no kubeconfig, no API server,
    no daemon found, no token to send)."""


@dataclass(frozen=True)
class Options:
    """Where the daemons are and how to ask them (``kubectl netctl``'s flags)."""

    kubeconfig: str | None = None  # None: $KUBECONFIG, else ~/.kube/config
    namespace: str = "kube-system"
    selector: str = "app.kubernetes.io/name=netctl"
    port: int = 9470
    token: str = ""  # "": the kubeconfig's
    timeout: float = 10.0  # the API server's answers, then each node's
    tls: ssl.SSLContext | None = None  # HTTPS to the daemons (query-tls-cert)


def query(opts: Options, what: str, path: str, *, ip: str | None = None,
          at: float | None = None, notes: Iterable[str] = ()) -> dict[str, Any]:
    """Ask every node ``path`` and merge the answers as ``what`` (:func:`merge`);
    :class:`ClusterError` when no node could be asked."""
    from netctl.kubeapi.api import with_api
    from netctl.kubeapi.daemons import block_owners, find_daemons
    from netctl.kubeapi.errors import ApiError, KubeSettings

    async def go(api: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}

        async def read(key: str, fn: Callable[[], Awaitable[Any]]) -> None:
            try:
                found[key] = await fn()
            except ApiError as exc:  # raised once both are done, not as a group
                found["error"] = exc

        async def no_owners() -> None:
            return None

        async with trio.open_nursery() as nursery:  # the two lists at once
            nursery.start_soon(read, "daemons", partial(
                find_daemons, api, opts.namespace, opts.selector, opts.port))
            nursery.start_soon(read, "owners", partial(block_owners, api, ip, at)
                               if ip else no_owners)
        if "error" in found:
            raise found["error"]
        daemons, owners = found["daemons"], found["owners"]
        if not daemons:
            raise ClusterError(f"no netctl daemon found: no pod with label {opts.selector} "
                               f"on a node in namespace {opts.namespace} (--netctl-namespace, "
                               "--selector)")
        auth = f"Bearer {opts.token}" if opts.token else await api.authorization()
        if not auth.lower().startswith("bearer "):
            raise ClusterError("the kubeconfig's credentials are no bearer token (client "
                               "certificates?): the daemons check a token with the API "
                               "server; give one with --token")
        targets = [Target(d.node, d.host, d.port) for d in daemons if not d.missing]
        answers = await ask_all(targets, path, auth, timeout=opts.timeout, tls=opts.tls)
        answers += [Answer(d.node, error=d.missing) for d in daemons if d.missing]
        return merge(what, answers, notes=notes, owners=owners)

    try:
        return with_api(KubeSettings(opts.kubeconfig, api_timeout=opts.timeout), go)
    except ApiError as exc:
        said = f"{exc.status} {exc.reason}" if exc.status else exc.reason or str(exc)
        raise ClusterError(f"the API server: {said}") from None
