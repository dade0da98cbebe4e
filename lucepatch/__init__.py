"""lucepatch: versioned patch series for upstreams that have not caught up with your hardware."""

__version__ = "0.1.0"
