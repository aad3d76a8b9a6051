"""The device host process: one per device of a TaskExecutor that resident operators use
(``map_batches(..., resident=True)``). Spawned by its TaskExecutor with the device's
isolation environment (never forked: CUDA cannot survive a fork), it imports the device
framework and creates its CUDA context once, then keeps the resident operators' instances,
each opened once, and runs the batches of every subtask on the device on them.

Run as ``python -m accelflow.runtime.devicehost ...`` (see ``_host.main``) by
``runtime/taskexecutor/_devicehosts.py``; nothing imports it.
"""
