"""mcutrain exporter: quantization, C serialization, memory plans, PlatformIO projects, simulators, device client."""
