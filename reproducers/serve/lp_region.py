"""lp_region: HAMi-core's shared region file, read from outside (stdlib only, like lp_workload).

The region (CUDA_DEVICE_MEMORY_SHARED_CACHE) is what every process of a pod charges its memory to;
HAMi's cuMemGetInfo reports the sum over its process slots. Reading the file itself shows what a
process left charged after it exited, and what one process of several is charged, without any CUDA
call (a reader that initialised HAMi would add a slot of its own and could tidy dead ones first).

The layout is `shared_region_t` of src/multiprocess/multiprocess_memory_limit.h. The offsets below
were taken with offsetof() from that header at 54b1305 (region 1.1), 8f3a89c and 52f33fc (1.2),
x86-64 glibc, and are the same in all three (1.2 made the fields _Atomic and turned one unused word
of a slot into its seqlock); tests/test_serve.py compiles the header of every commit it can reach
and compares. A region of any other MAJOR.MINOR is refused, never guessed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

MAX_DEVICES = 16  # CUDA_DEVICE_MAX_COUNT
MAX_PROCS = 1024  # SHARED_REGION_MAX_PROCESS_NUM
MAGIC = 19920718  # MULTIPROCESS_SHARED_REGION_MAGIC_FLAG: initialized_flag once the region is set up

# (major, minor) -> offsets in bytes (shared_region_t / shrreg_proc_slot_t / device_memory_t)
LAYOUTS = {
    (1, 1): {"limit": 1600, "sm_limit": 1728, "procs": 1856, "slot": 1960, "slot_used": 8, "device_memory": 64,
             "proc_num": 2008896, "size": 2008952},
    (1, 2): {"limit": 1600, "sm_limit": 1728, "procs": 1856, "slot": 1960, "slot_used": 8, "device_memory": 64,
             "proc_num": 2008896, "size": 2008952},
}
# device_memory_t: five counters, in this order
MEMORY_FIELDS = ("context_size", "module_size", "data_size", "offset", "total")


class RegionError(Exception):
    """The file is not a region this reader knows (absent, short, not set up, another version)."""


@dataclass
class Slot:
    pid: int
    hostpid: int
    used: list[dict] = field(default_factory=list)  # per device: MEMORY_FIELDS -> bytes

    def total(self, dev: int = 0) -> int:
        return self.used[dev]["total"]

    def to_json(self, dev: int = 0) -> dict:
        return {"pid": self.pid, "hostpid": self.hostpid, **self.used[dev]}


@dataclass
class Region:
    version: tuple[int, int]
    initialized: bool
    limits: list[int]
    slots: list[Slot]

    def slot(self, pid: int) -> Slot | None:
        return next((s for s in self.slots if s.pid == pid), None)

    def charged(self, dev: int = 0) -> int:
        """What HAMi's cuMemGetInfo would report as used on `dev`: the sum over every slot."""
        return sum(s.total(dev) for s in self.slots)

    def to_json(self, dev: int = 0) -> dict:
        return {"version": f"{self.version[0]}.{self.version[1]}", "limit": self.limits[dev],
                "charged": self.charged(dev), "slots": [s.to_json(dev) for s in self.slots]}


def parse(data: bytes) -> Region:
    if len(data) < 12:
        raise RegionError(f"{len(data)} bytes: not a HAMi-core shared region")
    flag, major, minor = struct.unpack_from("<iII", data, 0)
    lay = LAYOUTS.get((major, minor))
    if lay is None:
        raise RegionError(f"region version {major}.{minor}: no known layout (known: "
                          + ", ".join(f"{a}.{b}" for a, b in sorted(LAYOUTS)) + ")")
    if len(data) < lay["size"]:
        raise RegionError(f"{len(data)} bytes, shorter than a {major}.{minor} region ({lay['size']})")
    limits = list(struct.unpack_from(f"<{MAX_DEVICES}Q", data, lay["limit"]))
    (proc_num,) = struct.unpack_from("<i", data, lay["proc_num"])
    if not 0 <= proc_num <= MAX_PROCS:
        raise RegionError(f"proc_num {proc_num} is out of range: not a {major}.{minor} region")
    slots = []
    for i in range(proc_num):
        base = lay["procs"] + i * lay["slot"]
        pid, hostpid = struct.unpack_from("<ii", data, base)
        used = []
        for d in range(MAX_DEVICES):
            vals = struct.unpack_from("<5Q", data, base + lay["slot_used"] + d * lay["device_memory"])
            used.append(dict(zip(MEMORY_FIELDS, vals)))
        slots.append(Slot(pid, hostpid, used))
    return Region((major, minor), flag == MAGIC, limits, slots)


def read(path: str) -> Region:
    """The region at `path` as it is now (one read of the whole file)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise RegionError(f"{path} does not exist: no process of the run set up a region")
    except OSError as exc:
        raise RegionError(f"cannot read {path}: {exc.strerror or exc}")
    return parse(data)
