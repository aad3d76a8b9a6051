"""The manual clock the JobManager's parts are tested with (issue 26.8): its waits never block,
end at their deadline, or earlier when a scheduled callback satisfied them."""

from __future__ import annotations

import queue
import threading

import pytest

from accelflow.runtime import SYSTEM_CLOCK, ManualClock


def test_a_queue_wait_ends_when_a_callback_puts_into_it_not_at_its_deadline() -> None:
    clock, source = ManualClock(), queue.Queue[str]()
    clock.call_later(3, lambda: source.put("registered"))
    clock.call_later(4, lambda: source.put("too late for the first wait"))
    assert clock.get(source, 10) == "registered"
    assert clock.monotonic() == 3
    with pytest.raises(queue.Empty):
        clock.get(queue.Queue[str](), 0.5)
    assert clock.monotonic() == 3.5  # the second callback is not due yet


def test_an_event_wait_and_a_condition_wait_end_at_the_first_callback_that_ran() -> None:
    clock, event = ManualClock(), threading.Event()
    clock.call_later(2, event.set)
    assert clock.wait_event(event, 5) and clock.monotonic() == 2
    condition = threading.Condition()
    clock.call_later(1, lambda: None)  # a notify, as far as the waiter knows: it checks again
    with condition:
        assert clock.wait(condition, 5) is True and clock.monotonic() == 3
        assert clock.wait(condition, 5) is False and clock.monotonic() == 8


def test_callbacks_run_in_time_order_and_sleep_moves_both_clocks() -> None:
    clock, ran = ManualClock(), []
    clock.call_later(2, lambda: ran.append(("b", clock.monotonic())))
    clock.call_later(1, lambda: ran.append(("a", clock.monotonic())))
    clock.call_later(1, lambda: ran.append(("a2", clock.monotonic())))
    clock.sleep(10)
    assert ran == [("a", 1), ("a2", 1), ("b", 2)]
    assert (clock.monotonic(), clock.time()) == (10, ManualClock.EPOCH + 10)


def test_the_system_clock_waits_on_the_queue_itself() -> None:
    source = queue.Queue[int]()
    with pytest.raises(queue.Empty):
        SYSTEM_CLOCK.get(source, 0)
    source.put(7)
    assert SYSTEM_CLOCK.get(source, 0) == 7
