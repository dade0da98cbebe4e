"""Cluster side of lucepatch: manifests, validation, the node swap script, Job logs, client calls.

The ``kubernetes`` client is optional (``pip install 'lucepatch[k8s]'``: a live cluster only) and
imported lazily; PyYAML comes with lucepatch (`render` reads and writes YAML), imported where YAML is
read or written, so rendering text and running the swap script need neither.
"""
