"""Which HAMi-core series line fits a node: read a node's libvgpu.so (a file, an image, a pod),
name the line, the profile and the commands that build its drop-in replacement.

- ``libfacts``: what the bytes say (pyelftools): shared-region version, an embedded HAMi-core
  commit where the build stamped one, debug info, build id.
- ``fit``: the lines (compatible_hami.toml ``[series.<target>]``: base, shared-region version, the
  HAMi releases a line's build may replace) against those facts; the commands to run.
- ``sources``: getting the library out of an image (docker SDK, never run) or a running pod
  (kubernetes client behind LUCEPATCH_KUBECONFIG).
"""
