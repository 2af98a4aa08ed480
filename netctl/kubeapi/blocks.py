"""IPAMBlock objects through the API: claim, hand over, answer, release — each one request
whose outcome the API server decides (create is the claim, AlreadyExists means another
node has it; every change carries the resourceVersion read), so that nodes racing for a
block end with one owner. The caches of blocks and nodes are
:class:`~netctl.kubeapi.informer.Informer`\\ s over :data:`BLOCKS` and :data:`NODES`.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, TypeVar

import msgspec

from netctl.kubeapi.errors import ApiError
from netctl.kubeapi.objects import (
    BLOCK_API_VERSION,
    BLOCK_GROUP,
    BLOCK_KIND,
    BLOCK_LENDER_LABEL,
    BLOCK_NODE_LABEL,
    BLOCK_SCOPE_LABEL,
    Block,
    BlockMeta,
    BlockOwner,
    BlockSpec,
    Borrow,
    StickyEntry,
    TransferAsk,
    decode_block,
    decode_blocks,
)

if TYPE_CHECKING:  # the client itself: its callers have it (a command may not load it)
    from netctl.kubeapi.api import Api

S = TypeVar("S", bound=BlockSpec)
B = TypeVar("B", bound=Block)
BLOCKS = f"/apis/{BLOCK_GROUP}/v1/ipamblocks"
NODES = "/api/v1/nodes"


NODE_LABEL, SCOPE_LABEL, LENDER_LABEL = BLOCK_NODE_LABEL, BLOCK_SCOPE_LABEL, BLOCK_LENDER_LABEL


def scope_digest(scope: str) -> str:
    """A uniqueness scope as a label value (and in the blocks' names)."""
    return hashlib.sha256(scope.encode()).hexdigest()[:10]


def labels_for(spec: BlockSpec, lender: str = "") -> dict[str, str]:
    out = {NODE_LABEL: spec.node, SCOPE_LABEL: scope_digest(spec.scope)}
    if lender:
        out[LENDER_LABEL] = lender
    return out


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _body(block: Block) -> bytes:
    """``block`` as a request body. apiVersion and kind always go along: a custom resource
    without them is refused (400 "Object 'Kind' is missing"), and ``omit_defaults`` would
    leave out their default values."""
    doc = msgspec.to_builtins(block)
    doc["apiVersion"], doc["kind"] = BLOCK_API_VERSION, BLOCK_KIND
    return msgspec.json.encode(doc)


async def claim(api: Api, name: str, spec: BlockSpec, lender: str = "") -> Block | None:
    """Create the block (the claim); None when it exists already (another claim won).
    ``lender``: a borrow's (``spec`` a BorrowSpec), the node whose block it asks an
    address of."""
    body = _body(Block(metadata=BlockMeta(name=name, labels=labels_for(spec, lender)),
                       spec=spec))
    try:
        return decode_block(await api.request("create", "POST", BLOCKS, body=body))
    except ApiError as exc:
        if exc.status == 409:
            return None
        raise


async def get(api: Api, name: str) -> Block | None:
    data = await api.get(f"{BLOCKS}/{name}")
    return None if data is None else decode_block(data)


async def get_borrow(api: Api, name: str) -> Borrow | None:
    """The borrow object ``name``; None when there is none of that name (gone, or the
    name a block's)."""
    found = await get(api, name)
    return found if isinstance(found, Borrow) else None


async def hand_over(api: Api, block: Block, node: str) -> Block | None:
    """``block`` (as read) becomes ``node``'s, its previous owner kept in its history;
    None when it changed since it was read (another node took it, or it was released)."""
    return await _update(api, block, _handed(block.spec, node))


def _handed(spec: S, node: str) -> S:
    """``spec`` made ``node``'s, its owner until now the last of its history."""
    owners = [*spec.history, BlockOwner(spec.node, spec.claimedAt, now_rfc3339())]
    return msgspec.structs.replace(spec, node=node, claimedAt=now_rfc3339(),
                                   history=owners[-20:])


async def answer(api: Api, borrow: Borrow, grant: str) -> Borrow | None:
    """The owner's answer to a borrowed address (``granted`` or ``refused``), written on
    the borrow as read; None when it changed or went meanwhile."""
    return await _update(api, borrow, msgspec.structs.replace(borrow.spec, grant=grant))


async def set_reserved(api: Api, block: Block, entries: list[StickyEntry]) -> Block | None:
    """The sticky reservations of ``block`` (as read) set to ``entries``; None when it
    changed or went meanwhile."""
    return await _update(api, block, msgspec.structs.replace(block.spec, reserved=entries))


async def ask_transfer(api: Api, borrow: Borrow, ask: TransferAsk) -> Borrow | None:
    """Ask the node of ``borrow`` (as read) to hand it over (``ask``: for a sticky
    identity whose address it is); None when it changed meanwhile."""
    return await _update(api, borrow, msgspec.structs.replace(borrow.spec, transfer=ask))


async def withdraw_transfer(api: Api, borrow: Borrow) -> Borrow | None:
    """The ask on ``borrow`` (as read) taken back, unanswered; None when it changed
    meanwhile (answered, perhaps handed over)."""
    return await _update(api, borrow, msgspec.structs.replace(borrow.spec, transfer=None))


async def answer_transfer(api: Api, borrow: Borrow, granted: bool) -> Borrow | None:
    """The node of ``borrow`` answers an ask for it: granted, it becomes the asking node's
    (its previous owner in its history, no reservation on it any more); refused, the ask
    says so. None when it changed meanwhile."""
    spec, ask = borrow.spec, borrow.spec.transfer
    if ask is None:
        return None
    if not granted:
        return await _update(api, borrow, msgspec.structs.replace(
            spec, transfer=msgspec.structs.replace(ask, refused=True)))
    return await _update(api, borrow, msgspec.structs.replace(
        _handed(spec, ask.node), transfer=None, reserved=[], identity=ask.identity,
        ifname=ask.ifname))


async def _update(api: Api, block: B, spec: BlockSpec, lender: str = "") -> B | None:
    """``block`` (as read) with ``spec`` and its labels (:func:`labels_for`; the lender
    kept unless ``lender`` is given), under the resourceVersion read; None when it changed
    or went meanwhile (409, 404) — or is no ``block`` any more."""
    labels = {**block.metadata.labels,
              **labels_for(spec, lender or block.metadata.labels.get(LENDER_LABEL, ""))}
    new = Block(metadata=BlockMeta(name=block.metadata.name, labels=labels,
                              resourceVersion=block.metadata.resourceVersion), spec=spec)
    try:
        done = decode_block(await api.request(
            "update", "PUT", f"{BLOCKS}/{block.metadata.name}", body=_body(new)))
    except ApiError as exc:
        if exc.status in (404, 409):
            return None
        raise
    return done if isinstance(done, type(block)) else None


async def listed(api: Api, selector: str) -> list[Block]:
    """The blocks ``selector`` (a label selector) selects, from the API server's cache:
    what a node reads of other nodes' blocks, when it needs to (a claim, a sticky
    address published elsewhere), instead of watching them all."""
    data = await api.list(BLOCKS, [("labelSelector", selector), ("resourceVersion", "0")])
    return decode_blocks(data)


async def label(api: Api, block: Block, lender: str = "") -> Block | None:
    """``block`` (as read) labelled as :func:`labels_for` says — ``lender``, a borrow
    object's: the node whose block it asks an address of now —; None when it changed
    meanwhile."""
    return await _update(api, block, block.spec, lender)


async def release(api: Api, block: Block) -> bool:
    """Delete ``block`` if it is still as read; False when it changed meanwhile."""
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {
        "uid": block.metadata.uid, "resourceVersion": block.metadata.resourceVersion}}
    try:
        await api.request("delete", "DELETE", f"{BLOCKS}/{block.metadata.name}",
                          body=msgspec.json.encode(options))
    except ApiError as exc:
        if exc.status == 404:
            return True
        if exc.status == 409:
            return False
        raise
    return True
