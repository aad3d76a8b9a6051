"""``python -m accelflow.runtime.devicehost FD ADDRESS SPEC_JSON``: a device host."""

from accelflow.runtime.devicehost._host import main

main()
