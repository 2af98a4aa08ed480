"""We test the table of a block's life on a node (:mod:`netctl.ipam.cluster.lifecycle`), pure:
a claim ends held or taken; a held block is settled (held again, nothing written), released
or lost; an ended block takes no event; an event a state does not take is an error, never
a silent change; and, for any sequence of events, the states reached are the table's and
nothing follows an end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netctl.ipam.cluster.lifecycle import (
    CLAIMING,
    ENDED,
    EVENTS,
    HELD,
    LOST,
    RELEASED,
    TABLE,
    TAKEN,
    LifecycleError,
    next_state,
)


def test_a_claim_ends_held_or_taken() -> None:
    assert next_state(CLAIMING, "granted") == HELD
    assert next_state(CLAIMING, "refused") == TAKEN
    for event in EVENTS - {"granted", "refused"}:
        with pytest.raises(LifecycleError, match=f"a claiming block takes no '{event}'"):
            next_state(CLAIMING, event)


def test_a_held_block_is_settled_released_or_lost() -> None:
    assert next_state(HELD, "settled") == HELD  # read back at start: nothing to write
    assert next_state(HELD, "released") == RELEASED
    assert next_state(HELD, "lost") == LOST
    for event in ("granted", "refused"):
        with pytest.raises(LifecycleError):
            next_state(HELD, event)


def test_an_ended_block_takes_no_event() -> None:
    assert ENDED == {TAKEN, RELEASED, LOST}
    for state in ENDED:
        for event in EVENTS:
            with pytest.raises(LifecycleError):
                next_state(state, event)
    assert not any(state in ENDED for state, _ in TABLE)


@given(st.lists(st.sampled_from(sorted(EVENTS | {"unknown"})), max_size=12))
def test_any_sequence_of_events_stays_in_the_table(events: list[str]) -> None:
    state = CLAIMING
    for event in events:
        try:
            after = next_state(state, event)
        except LifecycleError:
            assert (state, event) not in TABLE
            continue
        assert TABLE[(state, event)] == after
        assert after in {HELD} | ENDED
        state = after
    assert state in {CLAIMING, HELD} | ENDED
