"""Cluster side of lucepatch: manifests, validation, the node swap script, Job logs, client calls.

The ``kubernetes`` client and PyYAML are optional (``pip install 'lucepatch[k8s]'``); every
module imports them lazily so rendering text and running the swap script need neither.
"""
