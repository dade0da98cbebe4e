"""Turning a proven series into an upstream pull request."""
