"""A driver with a fixed device list, for tests and for resources a host does not discover.

Config::

    external-resources: fpga
    external-resource.fpga.amount: 2
    external-resource.fpga.driver-factory.class: accelflow.testing:StaticDriverFactory
    external-resource.fpga.param.addresses: "0,1"
    external-resource.fpga.param.env-var: FPGA_VISIBLE_DEVICES   # optional isolation variable
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Set

from accelflow._errors import ConfigError
from accelflow.resources import (
    ExternalResourceDriver,
    ExternalResourceDriverFactory,
    ExternalResourceInfo,
)

_PARAMS = {"addresses", "env-var"}


class StaticDriver(ExternalResourceDriver):
    def __init__(self, addresses: list[str], env_var: str | None) -> None:
        self.addresses = addresses
        self.env_var = env_var

    def retrieve_resource_info(self, amount: int) -> Set[ExternalResourceInfo]:
        return {ExternalResourceInfo(index=a) for a in self.addresses}

    def isolation_env(self, infos: Collection[ExternalResourceInfo]) -> Mapping[str, str]:
        if not self.env_var:
            return {}
        return {self.env_var: ",".join(info.address for info in sorted(infos))}


class StaticDriverFactory(ExternalResourceDriverFactory):
    def create_external_resource_driver(self, params: Mapping[str, str]) -> StaticDriver:
        unknown = sorted(set(params) - _PARAMS)
        if unknown:
            raise ConfigError(f"unknown parameter(s) {unknown}; known: {sorted(_PARAMS)}", key="param")
        raw = params.get("addresses", "")
        addresses = [a.strip() for a in raw.split(",") if a.strip()]
        if not addresses:
            raise ConfigError("expected a comma-separated list such as '0,1'", key="param.addresses")
        return StaticDriver(addresses, params.get("env-var"))
