"""Every config key and environment variable accelflow reads, with its parser, default and help.

This table is the single source for validation, ``docs/configuration.md`` and the CLI. Keys
follow Flink's names where Flink has one. Per-resource keys are ``external-resource.<name>.``
followed by one of :data:`RESOURCE_SUFFIXES` (``param.<p>`` is free-form).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from accelflow.config import _parse as p

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Key(Generic[T]):
    """One config key: its name, how its value is parsed, its default and a one-line help."""

    name: str
    parse: Callable[[object], T]
    default: T | None
    help: str
    aliases: tuple[str, ...] = ()
    """Other names accepted for this key (e.g. Flink's older ``state.checkpoints.dir``); a
    value given under an alias is stored and returned under :attr:`name`."""


KEYS: dict[str, Key[Any]] = {}
RESOURCE_SUFFIXES: dict[str, Key[Any]] = {}
ALIASES: dict[str, str] = {}
"""Alias name -> the canonical name of its key."""


def _key(
    name: str, parse: Callable[[object], T], default: T | None, help: str, *, aliases: tuple[str, ...] = ()
) -> Key[T]:
    key = Key(name, parse, default, help, aliases)
    KEYS[name] = key
    for alias in aliases:
        ALIASES[alias] = name
    return key


def canonical_name(name: str) -> str:
    """The canonical name of ``name``: the key it is an alias of, or ``name`` itself.

    >>> canonical_name("state.checkpoints.dir")
    'execution.checkpointing.dir'
    """
    return ALIASES.get(name, name)


def _suffix(name: str, parse: Callable[[object], T], default: T | None, help: str) -> Key[T]:
    key = Key(name, parse, default, help)
    RESOURCE_SUFFIXES[name] = key
    return key


# -- external resources (issue: framework) -----------------------------------------------------
EXTERNAL_RESOURCES = _key(
    "external-resources", p.string, None,
    "';'-separated names of the external resources, e.g. 'gpu;fpga'; 'none' for none.",
)
RESOURCE_PREFIX = "external-resource."
AMOUNT = _suffix("amount", p.positive_int, None, "Devices per TaskExecutor (a positive integer).")
DRIVER_FACTORY = _suffix(
    "driver-factory.class", p.string, None,
    "Driver factory: 'package.module:Class', 'package.module.Class' or an entry point name "
    "in the group 'accelflow.external_resources' (e.g. 'gpu').",
)
ON_DISCOVERY_FAILURE = _suffix(
    "on-discovery-failure", p.choice("fail", "degrade"), "fail",
    "'fail': the TaskExecutor refuses to start; 'degrade': start with no infos and report it.",
)
KUBERNETES_CONFIG_KEY = _suffix(
    "kubernetes.config-key", p.string, None,
    "Kubernetes extended resource to request, e.g. 'nvidia.com/gpu'.",
)
YARN_CONFIG_KEY = _suffix(
    "yarn.config-key", p.string, None, "YARN resource type to request, e.g. 'yarn.io/gpu'."
)
VENDOR = _suffix(
    "vendor", p.string, None,
    "Spark's shorthand: vendor 'nvidia.com' means the Kubernetes key 'nvidia.com/<name>'.",
)
KUBERNETES_NODE_SELECTOR = _suffix(
    "kubernetes.node-selector", p.string_map, None,
    "Node labels the TaskExecutor pod must match: 'k=v,k2=v2' or a mapping.",
)
KUBERNETES_GPU_PRODUCT = _suffix(
    "kubernetes.gpu-product", p.string, None,
    "Shorthand for the node selector 'nvidia.com/gpu.product=<value>', e.g. 'NVIDIA-A100-SXM4-80GB'.",
)
KUBERNETES_TOLERATIONS = _suffix(
    "kubernetes.tolerations", p.json_list, None,
    "Pod tolerations as a JSON list of V1Toleration objects.",
)
RAY_RESOURCE_NAME = _suffix(
    "ray.resource-name", p.string, None,
    "Ray custom resource that stands for this resource (default: the resource name).",
)
WARM_FRAMEWORK = _suffix(
    "warm.framework", p.choice("auto", "torch", "cupy", "none"), "auto",
    "What a warm process of one of this resource's devices (a device host, a warm subtask "
    "process) imports and initialises before its first use: 'torch' (import, CUDA context), "
    "'cupy' (the same), 'auto' (torch where installed, else CuPy, else nothing) or 'none'.",
)
WARM_PRELOAD: Key[tuple[str, ...]] = _suffix(
    "warm.preload", p.module_names, None,
    "Modules a warm process of this resource's devices imports ahead of its first use, e.g. "
    "'torchvision, my_models.cnn' (the module of a resident model's class).",
)
PARAM_PREFIX = "param."

# -- local cluster and scheduling (issue: runtime) ---------------------------------------------
# Upper bounds of what starts processes: each slot can run a subtask process, each TaskExecutor
# is a process (or Ray actor). A typo such as 100000 fails at load instead of forking the machine.
MAX_SLOTS_PER_TASKEXECUTOR = 1024
MAX_LOCAL_TASKEXECUTORS = 256
MAX_RAY_TASKEXECUTORS = 4096
MAX_PARALLELISM = 32768  # Flink's upper limit of max parallelism
MAX_CPU_CORES = 4096

NUMBER_TASKMANAGER = _key(
    "local.number-taskmanager",
    p.int_in_range(1, MAX_LOCAL_TASKEXECUTORS, "each TaskExecutor is a process"), 1,
    f"TaskExecutor processes of the embedded local cluster (at most {MAX_LOCAL_TASKEXECUTORS}).",
)
LOCAL_START_METHOD = _key(
    "local.start-method", p.choice("zygote", "spawn"), "zygote",
    "How the embedded local cluster starts a TaskExecutor process: 'zygote' forks it from a "
    "helper process that lives as long as the client and has imported accelflow's runtime, "
    "NumPy and cloudpickle once (milliseconds); 'spawn' starts a fresh interpreter, which "
    "imports them again (0.2-0.4 s).",
)
NUMBER_OF_TASK_SLOTS = _key(
    "taskmanager.numberOfTaskSlots",
    p.int_in_range(1, MAX_SLOTS_PER_TASKEXECUTOR, "each slot can run a subtask process"), 1,
    f"Slots per TaskExecutor (at most {MAX_SLOTS_PER_TASKEXECUTOR}). When not set, a local "
    "environment gives each TaskExecutor enough slots for the job's largest parallelism.",
)
DEVICE_POOL_SIZE = _key(
    "taskmanager.device-pool.size", p.int_in_range(0, 16, "each is a process holding a device context"), 1,
    "Warm subtask processes a TaskExecutor keeps ready per device that has had work (its device "
    "framework imported, its CUDA context made; a local cluster started for a job spawns them for "
    "the devices the job will use as it starts), at least: a device keeps one per subtask it ran "
    "at once (e.g. 2 for two subtasks at gpu 0.5), up to 16; a subtask holding one device starts "
    "in one. 0: none (every subtask is forked).",
)
DEVICE_POOL_FORK = _key(
    "taskmanager.device-pool.fork", p.boolean, True,
    "Fork the warm subtask processes from a warm zygote: one process per device framework and "
    "warm.preload that imported them once (never a CUDA context), so a refill costs the child's "
    "CUDA context (0.1-0.4 s) instead of a fresh interpreter's imports (torch: 2-5 s), and "
    "back-to-back jobs of a session cluster all start warm. false: spawn each one.",
)
RESIDENT_MAX_INSTANCES = _key(
    "taskmanager.resident.max-instances", p.int_in_range(1, 1024, "each holds a model in device memory"), 8,
    "Resident operator instances (resident=True) a device host keeps per device; beyond it, the "
    "least recently used one that no subtask uses is closed.",
)
PARALLELISM_DEFAULT = _key(
    "parallelism.default", p.int_in_range(1, MAX_PARALLELISM, "each subtask is a process"), 1,
    "Parallelism of operators that set none.",
)
PLACEMENT_POLICY = _key(
    "scheduler.placement-policy", p.choice("pack", "spread"), "pack",
    "'pack' fills a TaskExecutor and a device before the next; 'spread' balances them.",
)
DEVICE_ISOLATION = _key(
    "scheduler.device-isolation", p.boolean, True,
    "Set CUDA_VISIBLE_DEVICES (and the like) per subtask to exactly its devices.",
)
BATCH_SIZE = _key(
    "pipeline.batch-size", p.int_in_range(1, 2**24, "a batch is held in memory"), 1024, "Default batch size of map_batches."
)
ARRAY_SHARING = _key(
    "pipeline.array-sharing", p.choice("auto", "copy"), "auto",
    "How the subtasks of a local job get a NumPy source array that is not an np.memmap "
    "(which they map by its file): 'auto' reads it straight out of the client's memory, "
    "chunk by chunk (Linux process_vm_readv: no copy of the array, nothing to wait for at "
    "start), where the kernel lets one process read another's memory (no Yama ptrace "
    "restriction), and copies it once into shared memory elsewhere; 'copy' always copies it "
    "(the job holds the array twice and waits for the copy at start, but its chunks are views: "
    "faster for CPU-bound batch functions, see benchmarks/dataplane.py).",
)
PIPELINE_MAX_PARALLELISM = _key(
    "pipeline.max-parallelism", p.int_in_range(1, MAX_PARALLELISM, "Flink's upper bound"), None,
    "Key groups of keyed state and timers (the most a keyed operator can be rescaled to); "
    "not set: Flink's rule, 1.5 x the operator's parallelism rounded up to a power of two, "
    "at least 128.",
)
AUTO_WATERMARK_INTERVAL = _key(
    "pipeline.auto-watermark-interval", p.non_negative_seconds, 0.2,
    "How often assign_timestamps_and_watermarks emits a watermark (and checks idleness), e.g. "
    "'200 ms'; 0 disables periodic watermarks (the end of a bounded input still emits the last).",
)
BUFFER_TIMEOUT = _key(
    "execution.buffer-timeout", p.buffer_timeout, 0.1,
    "How long a record may wait in a partly filled chunk before it is sent on (a source's "
    "chunks, the records collected for the client), e.g. '100 ms' (Flink's default); 0 sends "
    "every record at once (lowest latency), -1 only full chunks. A source that pauses sends "
    "what it has at once whatever the timeout.",
)
RESTART_STRATEGY = _key(
    "restart-strategy", p.choice("none", "fixed-delay"), "none",
    "What to do when a subtask or TaskExecutor fails: 'none' fails the job.",
)
RESTART_ATTEMPTS = _key(
    "restart-strategy.fixed-delay.attempts", p.int_in_range(1, 2**31 - 1), 3,
    "Restarts before the job fails (fixed-delay).",
)
RESTART_DELAY = _key(
    "restart-strategy.fixed-delay.delay", p.non_negative_seconds, 1.0, "Delay between restarts (fixed-delay)."
)
STARTUP_TIMEOUT = _key(
    "taskmanager.registration.timeout", p.seconds, 60.0,
    "How long the JobManager waits for TaskExecutors to start and register.",
)
RUNTIME_MODE = _key(
    "execution.runtime-mode", p.choice("automatic", "streaming", "batch"), "streaming",
    "'streaming' (Flink's default): keyed reduce, sum, min, max, min_by and max_by emit the "
    "running value for every record, also of a bounded input; 'batch': one final value per key "
    "at the end of the input; 'automatic': batch when every source is bounded.",
)
EXECUTION_TARGET = _key(
    "execution.target", p.choice("local", "ray"), "local",
    "Where TaskExecutors run: 'local' processes or 'ray' actors.",
)

# -- checkpoints and recovery (issue: streaming) -----------------------------------------------
CHECKPOINT_INTERVAL = _key(
    "execution.checkpointing.interval", p.seconds, None,
    "Time between the triggers of two checkpoints, e.g. '10 s' (one still in flight delays the "
    "next, as does min-pause); not set: no checkpoints.",
)
CHECKPOINT_DIR = _key(
    "execution.checkpointing.dir", p.string, None,
    "Where checkpoints are written: a local path or an fsspec URL such as 's3://bucket/ckpt'. "
    "Not set: the JobManager's memory ('memory://'), good for failover within one run only.",
    aliases=("state.checkpoints.dir",),
)
CHECKPOINT_TIMEOUT = _key(
    "execution.checkpointing.timeout", p.seconds, 600.0,
    "A checkpoint not completed within this time is aborted.",
)
CHECKPOINT_MIN_PAUSE = _key(
    "execution.checkpointing.min-pause", p.non_negative_seconds, 0.0,
    "Least time between the end of one checkpoint and the start of the next.",
)
CHECKPOINTS_RETAINED = _key(
    "execution.checkpointing.num-retained", p.int_in_range(1, 1000, "each is kept in storage"), 1,
    "Completed checkpoints kept; older ones are deleted.",
    aliases=("state.checkpoints.num-retained",),
)
CHECKPOINT_RETENTION = _key(
    "execution.checkpointing.externalized-checkpoint-retention",
    p.upper_choice("DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION", "NO_EXTERNALIZED_CHECKPOINTS"),
    "DELETE_ON_CANCELLATION",
    "What happens to the checkpoints when the job is cancelled: 'DELETE_ON_CANCELLATION' "
    "deletes them, 'RETAIN_ON_CANCELLATION' keeps them to restore from; "
    "'NO_EXTERNALIZED_CHECKPOINTS' deletes them when the job is cancelled or fails.",
)
SAVEPOINT_DIR = _key(
    "execution.checkpointing.savepoint-dir", p.string, None,
    "Default directory of savepoints (a local path or an fsspec URL).",
    aliases=("state.savepoints.dir",),
)
STATE_RECOVERY_PATH = _key(
    "execution.state-recovery.path", p.string, None,
    "Checkpoint or savepoint to start the job from: a 'chk-<n>' or savepoint directory, or a "
    "job's checkpoint directory (its newest complete checkpoint is used).",
    aliases=("execution.savepoint.path",),
)
ALLOW_NON_RESTORED_STATE = _key(
    "execution.state-recovery.ignore-unclaimed-state", p.boolean, False,
    "Start even when the restored state has operators the job no longer has (their state is dropped).",
    aliases=("execution.savepoint.ignore-unclaimed-state",),
)
CHECKPOINT_PERMISSIONS = _key(
    "execution.checkpointing.permissions", p.choice("private", "group", "world"), "private",
    "Who may read the checkpoints and savepoints written on a local filesystem: 'private' "
    "(directories 0700, files 0600), 'group' (0750/0640: the owner's group may read them, "
    "e.g. to restore them as another user) or 'world' (0755/0644). Object stores (s3://...) "
    "keep their own access control.",
)
CHECKPOINT_SIGNING_KEY_FILE = _key(
    "execution.checkpointing.signing-key-file", p.string, None,
    "File holding the secret key (32 bytes or more) that signs checkpoints and savepoints "
    "(HMAC-SHA256 of their _metadata) and checks them before a restore; created with a random "
    "key (mode 0600) when missing. Not set: 'checkpoint-signing.key' in the per-user state "
    "directory ($ACCELFLOW_STATE_DIR, default $XDG_STATE_HOME/accelflow). Give every user or "
    "machine that restores the same checkpoints the same file.",
)
VERIFY_CHECKPOINT_SIGNATURE = _key(
    "execution.state-recovery.verify-signature", p.boolean, True,
    "Refuse to restore a checkpoint or savepoint whose signature is missing or does not verify "
    "with the signing key. false trusts it as it is: its state is unpickled, which runs any code "
    "it holds, so only for checkpoints from storage that nobody else can write.",
)

# -- failover (issue 28) ------------------------------------------------------------------------
FAILOVER_IN_PLACE = _key(
    "execution.failover.in-place", p.boolean, True,
    "With checkpointing on, a failed subtask is replaced alone and the others roll back to the "
    "latest checkpoint inside their running processes (open() is not called again: models stay "
    "loaded); 'false' restarts every subtask, as Flink.",
)
STANDBY_SUBTASKS = _key(
    "execution.failover.standby-subtasks", p.int_in_range(0, 64, "each holds a slot and devices"), 0,
    "Extra subtasks deployed and opened, idle, per operator chain that asks for devices: a failed "
    "subtask's work moves to one at once (then a new standby is deployed in the background).",
)
HEARTBEAT_INTERVAL = _key(
    "heartbeat.interval", p.seconds, 1.0,
    "How often a subtask's heartbeat is written and a TaskExecutor checks its subtasks; must be "
    "smaller than heartbeat.timeout (a config error names both keys otherwise).",
)
HEARTBEAT_TIMEOUT = _key(
    "heartbeat.timeout", p.seconds, 30.0,
    "A subtask inside one call of user code (one record of a map, flat_map or filter, not their "
    "whole chunk; a batch; a source's read) or with no "
    "heartbeat for this long is hung: its stack is dumped, it is killed and fails over. open() "
    "never counts.",
)

# -- REST API (issue: observability) -----------------------------------------------------------
REST_ENABLED = _key(
    "rest.enabled", p.boolean, False, "Serve the REST API and web UI while a job runs."
)
REST_ADDRESS = _key("rest.address", p.string, "127.0.0.1", "Address the REST API binds to.")
REST_PORT = _key("rest.port", p.port, 8081, "Port of the REST API; 0 picks a free one.")
REST_TOKEN = _key("rest.token", p.string, None,
                  "Bearer token required by the REST API (default: a random token made at each start).")

# -- Ray (issue: scale-out) --------------------------------------------------------------------
RAY_ADDRESS = _key("ray.address", p.string, None, "Ray cluster to join: 'auto' or 'ray://host:port'.")
RAY_NUMBER_TASKMANAGER = _key(
    "ray.number-taskmanager",
    p.int_in_range(1, MAX_RAY_TASKEXECUTORS, "each TaskExecutor is a Ray actor"), 1,
    f"TaskExecutor actors to start on Ray (at most {MAX_RAY_TASKEXECUTORS}).",
)
RAY_LOCAL_NUM_CPUS = _key(
    "ray.local.num-cpus", p.int_in_range(1, 2**20), None, "CPUs of a local Ray instance."
)
RAY_LOCAL_NUM_GPUS = _key(
    "ray.local.num-gpus", p.int_in_range(0, 4096), None, "GPUs of a local Ray instance."
)
RAY_LOCAL_RESOURCES = _key(
    "ray.local.resources", p.resource_amounts, None,
    "Custom resources of a local Ray instance (JSON), e.g. '{\"fpga\": 2}'; CPU and GPU have keys of their own.",
)
RAY_PLACEMENT_TIMEOUT = _key(
    "ray.placement-timeout", p.seconds, 60.0, "How long to wait for Ray to place an actor."
)
RAY_CONNECT_TIMEOUT = _key(
    "ray.connect-timeout", p.seconds, 30.0,
    "How long to wait for the Ray cluster at ray.address to answer before failing.",
)
RAY_RUNTIME_ENV_WORKING_DIR = _key(
    "ray.runtime-env.working-dir", p.string, None,
    "Directory (or URI) shipped to every TaskExecutor actor as its working directory and "
    "import path (Ray runtime_env working_dir).",
)
RAY_RUNTIME_ENV_ENV_VARS = _key(
    "ray.runtime-env.env-vars", p.string_map, None,
    "Environment variables of every TaskExecutor actor: 'K1=v1,K2=v2' or a JSON object.",
)

# -- Kubernetes and YARN (issue: deployment) ---------------------------------------------------
KUBERNETES_POD_TEMPLATE_FILE = _key(
    "kubernetes.pod-template-file", p.string, None, "A pod template merged into rendered pods."
)
KUBERNETES_IMAGE = _key(
    "kubernetes.container.image", p.string, None, "Container image that has accelflow installed."
)
KUBERNETES_NAMESPACE = _key("kubernetes.namespace", p.string, None, "Namespace of rendered objects.")
KUBERNETES_JOB_NAME = _key("kubernetes.job-name", p.string, None, "Name of the rendered Job.")
TASKMANAGER_CPU = _key(
    "taskmanager.cpu.cores", p.positive_number_up_to(MAX_CPU_CORES), None,
    "CPU cores per TaskExecutor (cluster requests).",
)
TASKMANAGER_MEMORY = _key(
    "taskmanager.memory.process.size", p.memory_size, "1Gi", "Memory per TaskExecutor, e.g. '2Gi'."
)
YARN_APPLICATION_NAME = _key("yarn.application.name", p.string, None, "YARN service name.")
YARN_QUEUE = _key("yarn.application.queue", p.string, None, "YARN queue.")

# -- environment variables ---------------------------------------------------------------------
ACCELFLOW_HOME_ENV_VAR = "ACCELFLOW_HOME"
"""Base directory for relative discovery-script paths (like ``FLINK_HOME``)."""
ACCELFLOW_CONF_ENV_VAR = "ACCELFLOW_CONF"
"""A YAML config file used when ``--conf`` is not given (``-D`` still wins over it)."""
DATA_DIR_ENV_VAR = "ACCELFLOW_DATA_DIR"
"""Where the examples look for the Fashion-MNIST IDX files."""
STATE_DIR_ENV_VAR = "ACCELFLOW_STATE_DIR"
"""Where session clusters keep their state files (default ``$XDG_STATE_HOME/accelflow``)."""
ENTRY_POINT_GROUP = "accelflow.external_resources"
