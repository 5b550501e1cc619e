"""mcutrain's C sources as package data (installed as mcutrain.firmware): the core (core/), the firmware
application and its ports (app/), the offline PlatformIO dev-platforms (platforms/) and the host tools that
run firmware in simulators (host_tools/). Nothing here is imported; mcutrain.exporter.paths finds it."""
