"""Checkpoints after the sources finished (Flink's FLIP-147), on the side of a subtask whose
every upstream subtask has ended its input.

Such a subtask may still have much to do: what its upstream subtasks sent before they ended
waits in its channels (a shared-memory ring holds up to 32 MB of arrays per channel), and a
slow device stage works through it long after the sources read their last record. Barriers
travel behind records, so a barrier sent after the end would reach it only once it has
processed everything: no checkpoint could complete before the job's end, and a failure would
replay the job from its last checkpoint taken while the sources still read (or from its start).

Instead, the checkpoint coordinator triggers such a subtask directly (it is a *root* of the
checkpoint, as Flink triggers the first running tasks after finished ones). The subtask then
reads what is left in its ended channels into memory (:meth:`InFlight.drain`: reading is
cheap, processing is what is slow), puts those records in its checkpoint beside its operators'
state (as Flink's unaligned checkpoints keep in-flight data), acks, sends the barrier on, and
processes them (:meth:`InFlight.run`) taking part in later checkpoints with what is left. A
restore hands them back to the restored subtask, which processes them before ending.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import cloudpickle

from accelflow.runtime import in_flight_name

if TYPE_CHECKING:
    from accelflow.runtime.subtask._inputs import InputGate
    from accelflow.runtime.subtask._runner import _Runner


class InFlight:
    """The input events (records, watermarks, statuses: ``InputGate.receive``'s) a subtask
    took out of its ended input channels and has not processed."""

    def __init__(self, runner: _Runner) -> None:
        self.runner = runner
        self.records: deque[tuple[Any, ...]] = deque()
        #: the input channels being read (``_run_inputs``'s)
        self.gate: InputGate | None = None

    @property
    def name(self) -> str:
        return in_flight_name(self.runner.plan.nodes[0].state_name)

    def drain(self) -> None:
        """Read every input channel still open to its end (its upstream subtask has ended, so
        the end is there already) and keep its records, in order, for :meth:`run`."""
        gate = self.gate
        if gate is None:
            return
        for conn in list(gate.live):
            while conn in gate.live:  # the gate closes it at its end
                # a barrier here is of a checkpoint given up: nothing waits for it
                self.records.extend(e for e in gate.receive(conn) if e[0] != "checkpoint")

    def run(self) -> None:
        """Process the records kept, a chunk at a time, with checkpoints in between."""
        runner = self.runner
        while self.records:
            runner._on_input(self.records.popleft())
            runner._control()
            runner._timers()

    def clear(self) -> None:
        self.records.clear()
        self.gate = None

    def snapshot(self) -> dict[str, bytes]:
        """The records not processed yet, as checkpointed state (none: nothing)."""
        if self.runner.plan.nodes[0].source is not None or not self.records:
            return {}
        return {self.name: cloudpickle.dumps(list(self.records))}

    def restore(self, restored: dict[str, list[bytes]], index: int, parallelism: int) -> None:
        """Take back this subtask's share of the checkpointed records (every old subtask's
        records go to one new subtask: ``index`` takes old subtasks ``index``,
        ``index + parallelism``...)."""
        for blob in restored.get(self.name, [])[index::parallelism]:
            self.records.extend(cloudpickle.loads(blob) or [])
