"""Rollback in place (issue 28): a subtask that survived another's failure goes back to the
latest completed checkpoint inside its own process, and a standby subtask takes a failed one's
place, without calling ``open()`` again (``docs/failover.md``).

An *epoch* is one run of the job's data flow between two rollbacks; its data channels have
addresses of their own (the attempt number is in them), so nothing of an aborted epoch reaches
the next. The JobManager starts an epoch by sending every survivor a :class:`Rollback`; the
subtask's runner raises :class:`RollingBack` wherever it gets one (between two chunks, waiting
for input, waiting for the final checkpoint, connecting its channels: a subtask that failed in
``open()`` may never listen, or accept) and hands it to :meth:`Epochs.roll_back` once the
stack is unwound (so the source's reading generator is closed). A data channel that breaks
(the failed subtask's) makes a survivor wait for its rollback (:meth:`Epochs.await_rollback`)
instead of failing, when the job rolls back in place.

Rolling back: close the old epoch's channels (no end of stream is sent: the other side is
rolling back too), drop what is in flight (partial batches, collected chunks, records read
into memory at a checkpoint), reset every operator (its state goes: keyed state, timers, window
contents, watermark positions, queued async calls, requests to a resident instance; a sink is
closed and opened again), start the input watermark over, restore the operators' state of the checkpoint and the source's splits, listen on the
new address, and run again: connect downstream, accept upstream, go on as the new key.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from accelflow._errors import TransportError
from accelflow.dataflow.eventtime import MIN_TIMESTAMP
from accelflow.runtime import NotifyCheckpointComplete, Rollback, SubtaskRunning
from accelflow.runtime.subtask._channels import listen

if TYPE_CHECKING:
    from accelflow.runtime.subtask._runner import _Runner

#: how long a subtask whose data channel broke waits for its rollback before it fails with
#: that error (the JobManager sends the rollback, or cancels the job, at once: a safety net)
ROLLBACK_WAIT_S = 60.0


class RollingBack(BaseException):
    """Raised in the runner where a :class:`Rollback` arrives: unwinds to ``_Runner.run``.
    A ``BaseException``: no ``except Exception`` of user code on the way swallows it."""

    def __init__(self, order: Rollback) -> None:
        super().__init__(order.new_key)
        self.order = order


class Epochs:
    """The rollbacks of one subtask's runner."""

    def __init__(self, runner: _Runner) -> None:
        self.runner = runner
        self.contexts: list[Any] = []  # the RuntimeContexts handed out: renamed on a rollback

    def stand_by(self) -> None:
        """A standby subtask, opened: wait idle for the rollback that activates it (one that
        only renames it, after another rollback, keeps it waiting), then take it."""
        runner = self.runner
        runner.status.send(SubtaskRunning(runner.desc.key))
        while True:
            order = self._next_order(None)
            if order.new_key.index < runner.desc.parallelism:
                self.roll_back(order)
                return
            runner.desc = msgspec.structs.replace(runner.desc, key=order.new_key)
            runner.status.send(SubtaskRunning(order.new_key))

    def await_rollback(self, broken: TransportError) -> Rollback:
        """A data channel broke (another subtask failed): wait for the rollback, publishing
        checkpoints that complete meanwhile; fail with ``broken`` if none comes in time."""
        return self._next_order(time.monotonic() + ROLLBACK_WAIT_S, broken)

    def _next_order(self, deadline: float | None, broken: TransportError | None = None) -> Rollback:
        runner = self.runner
        while True:
            with runner.beat.waiting():
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if wait is not None and not runner.status.poll(wait):
                    assert broken is not None
                    raise broken
                msg = runner.status.recv()
            if isinstance(msg, Rollback):
                return msg
            if isinstance(msg, NotifyCheckpointComplete):
                runner._command(msg)
            # a checkpoint's trigger: the epoch is over, the checkpoint will not complete

    def roll_back(self, order: Rollback) -> None:
        """Go back to the checkpoint ``order`` names, as ``order.new_key``, in a new epoch."""
        runner = self.runner
        runner.beat.idle()  # until the runner's loop runs again (the handshake may wait long)
        self._close_channels()
        runner.in_flight.clear()
        for ctx in self.contexts:  # before the sinks open again: they name their output by index
            ctx.index_of_this_subtask, ctx.attempt_number = order.new_key.index, order.new_key.attempt
            ctx.standby = False
        for op in runner.ops:
            op.reset()
            op.records_in = op.records_out = 0
        runner.input_watermark = MIN_TIMESTAMP  # the new epoch's inputs start over
        plan = runner.plan
        outputs = tuple(msgspec.structs.replace(edge, addresses=addresses)
                        for edge, addresses in zip(plan.outputs, order.outputs, strict=True))
        runner.plan = msgspec.structs.replace(plan, outputs=outputs)
        runner.desc = msgspec.structs.replace(
            runner.desc, key=order.new_key, restored=order.restored, restored_checkpoint=order.checkpoint_id,
            splits=order.splits, listen_address=order.listen_address, expected_senders=order.expected_senders,
            standby=False)
        runner.last_checkpoint = order.checkpoint_id
        runner.ended = False
        runner.split_read = 0
        runner._restore()
        desc = runner.desc
        runner.listener = listen(desc.listen_address, desc.authkey) if desc.listen_address else None

    def _close_channels(self) -> None:
        """Close the old epoch's data channels, sending no end of stream."""
        runner = self.runner
        for router in getattr(runner, "all_routers", []):
            for conn in router.conns:
                try:
                    conn.close()
                except OSError:
                    pass
        runner._route([], 0)
        gate = runner.in_flight.gate
        if gate is not None:
            for conn in gate.live:
                conn.close()
            gate.close()
        if runner.listener is not None:
            runner.listener.close()  # removes its socket file
            runner.listener = None
