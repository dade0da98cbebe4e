"""What a driver-less builder (a CUDA devel image) sees, on a machine that has a GPU driver.

A devel image ships only `stubs/libcuda.so`; the link that fails there (F6: `libcuda.so.1, needed by
libggml-cuda.so, not found` + undefined `cuMem*`) succeeds on a GPU host, because ld resolves a
library's NEEDED entries through LD_LIBRARY_PATH, ld.so.conf and the default folders, where the
host's real `libcuda.so.1` lives. Run such a link in a private mount namespace with every
`libcuda.so.1` ld could find covered by an empty file: the host then looks like the devel image.

On the H200 host, masking only what `ldconfig -p` lists left the F6 re-link at 0 undefined symbols
(docs/lucebox/lucebox-f6-relink.h200.json); its processes load the driver's NVML from
/usr/local/nvidia/lib64, a LD_LIBRARY_PATH folder of the NVIDIA container runtime, most likely where
the unmasked libcuda.so.1 was.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from lucepatch.native.elf import DEFAULT_DIRS, ld_so_conf_dirs

DRIVER = "libcuda.so.1"

# the mount namespace is private to the command: the bind mounts vanish with it. An empty file
# (not ELF) is skipped by ld as incompatible, exactly like an absent one.
_MASK = ('e=$(mktemp) || exit 97; trap \'rm -f "$e"\' EXIT; '
         'for f in "$@"; do mount --bind "$e" "$f" || exit 97; done; '
         '"$LUCEPATCH_MASKED_SHELL" -c "$LUCEPATCH_MASKED_CMD"')


def driver_libraries(env: dict | None = None) -> list[str]:
    """Every libcuda.so.1 ld or the loader could find here: ld.so.cache, the CUDA compat
    folders, LD_LIBRARY_PATH and the default folders. Empty on a driver-less machine."""
    env = os.environ if env is None else env
    found: list[str] = []

    def add(path: str) -> None:
        if os.path.isfile(path) and path not in found:
            found.append(path)

    ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    if ldconfig:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.strip().startswith(DRIVER + " ") and "=>" in line:
                add(line.split("=>", 1)[1].strip())
    for path in sorted(glob.glob(f"/usr/local/cuda*/compat/{DRIVER}")):
        add(path)
    # ld reads /etc/ld.so.conf's folders itself (not only the cache) for a library's NEEDED entries
    for d in [*env.get("LD_LIBRARY_PATH", "").split(":"), *ld_so_conf_dirs(), *DEFAULT_DIRS]:
        if d and os.path.isabs(d):
            add(os.path.join(d, DRIVER))
    return found


def masked(command: str, libs: list[str]) -> list[str]:
    """argv running the shell `command` with `libs` covered (pass it with env from masked_env).
    Needs root and unshare(1); without libs the command runs as is."""
    if not libs:
        return [_shell(), "-c", command]
    return ["unshare", "-m", "sh", "-c", _MASK, "sh", *libs]


def _shell() -> str:
    # link lines cmake writes are run by bash elsewhere in the probes; keep the same shell
    return shutil.which("bash") or "sh"


def masked_env(command: str, env: dict | None = None) -> dict:
    out = dict(os.environ if env is None else env)
    # masked() runs the command from these two variables: always pass this env with its argv
    out["LUCEPATCH_MASKED_CMD"] = command
    out["LUCEPATCH_MASKED_SHELL"] = _shell()
    return out


def can_mask() -> bool:
    """True where a private mount namespace can be made (root with unshare(1))."""
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
