"""Builders: native (cmake) artifacts now; images and compile probes build on the same inputs."""
