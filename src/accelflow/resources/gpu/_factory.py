"""The GPU driver factory: the entry point ``gpu`` in ``accelflow.external_resources``."""

from __future__ import annotations

from collections.abc import Mapping

from accelflow.resources import ExternalResourceDriverFactory, RayResources
from accelflow.resources.gpu._driver import GPUDriver
from accelflow.resources.gpu._params import parse_params
from accelflow.resources.gpu._ray import RAY_GPU_IDS_ENV_VAR


class GPUDriverFactory(ExternalResourceDriverFactory):
    """Builds :class:`GPUDriver` from a resource's ``param.*`` keys.

    Named in the config as ``gpu`` (the entry point), ``accelflow.resources.gpu:GPUDriverFactory``
    or Flink's ``org.apache.flink.externalresource.gpu.GPUDriverFactory`` (an alias).

    Example:
        >>> driver = GPUDriverFactory().create_external_resource_driver(
        ...     {"discovery-script.path": "/usr/bin/true", "discovery-script.timeout": "5 s"})
        >>> driver.config.script.timeout
        5.0

    The parameters (keys ``external-resource.<name>.param.<p>``):

    * ``discovery-script.path``: run this script instead of discovering in process (a bare name
      is looked up on ``PATH`` only, never in the working directory);
    * ``discovery-script.args``: its arguments after the amount (split like a shell); without a
      script, Flink's default-script flags ``--enable-coordination-mode`` and
      ``--coordination-file PATH`` configure in-process coordination;
    * ``discovery-script.timeout``: how long it may run (default ``10 s``);
    * ``coordination``: in-process mode: use the host coordination file (default ``true``);
    * ``coordination-file``: in-process mode: that file (default: per user);
    * ``coordination.lock-timeout``: in-process mode: how long to wait for the coordination
      lock before a ``CoordinationError`` naming its holder (default ``5 s``).
    """

    def create_external_resource_driver(self, params: Mapping[str, str]) -> GPUDriver:
        """Check ``params`` and build the driver.

        Raises:
            ConfigError: one problem per wrong key, each named ``param.<p>``.
        """
        return GPUDriver(parse_params(params))

    def ray_resources(self, params: Mapping[str, str], amount: int) -> RayResources:
        """On Ray, each TaskExecutor actor asks for ``amount`` GPUs and the driver reports the
        ones Ray assigned (their ids arrive in ``ACCELFLOW_RAY_GPU_IDS``).

        Example:
            >>> GPUDriverFactory().ray_resources({}, 2).num_gpus
            2
        """
        return RayResources(num_gpus=amount, accelerator_ids_env=RAY_GPU_IDS_ENV_VAR)
