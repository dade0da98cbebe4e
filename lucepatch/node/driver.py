"""Will an image's CUDA start on a node's NVIDIA driver? (data: lucepatch/data/cuda_drivers.toml)

NVIDIA's CUDA images require `cuda>=<their minor>` of the node driver at container start
(NVIDIA_REQUIRE_CUDA, enforced by nvidia-container-cli), so an image whose CUDA is newer than the
driver's never starts: a CUDA 13.3 base on an Olares node's 595 driver fails before the server runs.
The gate compares the image's CUDA minor with the table's minimum driver for it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from lucepatch.errors import CheckFailed, UsageError

_VERSION = re.compile(r"^\d+(\.\d+){0,3}$")


@dataclass(frozen=True, order=True)
class DriverVersion:
    """595.84 / 580.65.06 as NVIDIA writes them; compared numerically, printed as given."""
    parts: tuple[int, ...]
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str, what: str = "driver version") -> "DriverVersion":
        text = str(text).strip()
        if not _VERSION.match(text):
            raise UsageError(f"{what}: {text!r} is not an NVIDIA driver version like 595.84 or 580.65.06")
        parts = tuple(int(p) for p in text.split("."))
        return cls(parts + (0,) * (3 - len(parts)), text)

    def __str__(self) -> str:
        return self.text or ".".join(map(str, self.parts))


@dataclass(frozen=True)
class CudaFloor:
    cuda: str
    min_driver: DriverVersion
    source: str


@dataclass(frozen=True)
class DriverGate:
    ok: bool
    image_cuda: str
    node_driver: DriverVersion
    min_driver: DriverVersion | None
    message: str

    def to_dict(self) -> dict:
        return {"name": "cuda-driver", "ok": self.ok, "image_cuda": self.image_cuda,
                "node_driver": str(self.node_driver),
                "min_driver": str(self.min_driver) if self.min_driver else None, "message": self.message}


@lru_cache(maxsize=1)
def _data() -> dict:
    with resources.files("lucepatch").joinpath("data", "cuda_drivers.toml").open("rb") as f:
        return tomllib.load(f)


def floors() -> dict[str, CudaFloor]:
    return {k: CudaFloor(k, DriverVersion.parse(v["min_driver"], f"cuda_drivers.toml [{k}]"), v["source"])
            for k, v in _data()["cuda"].items()}


def platform_drivers(name: str) -> list[DriverVersion]:
    plat = (_data().get("platforms") or {}).get(name)
    if not plat:
        raise UsageError(f"no platform {name!r} in lucepatch/data/cuda_drivers.toml")
    return [DriverVersion.parse(d, f"cuda_drivers.toml [platforms.{name}]") for d in plat["drivers"]]


def cuda_minor(text: str) -> str:
    """'13.0', '13.0.0', 'nvidia/cuda:13.0.0-runtime-ubuntu22.04' -> '13.0'."""
    m = re.search(r"(?:^|[:/])?(\d+)\.(\d+)(?:\.\d+)?(?:-|$)", str(text).rsplit(":", 1)[-1])
    if not m:
        raise UsageError(f"cannot read a CUDA version from {text!r}: give it as 13.0")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def check(image_cuda: str, node_driver: DriverVersion) -> DriverGate:
    minor = cuda_minor(image_cuda)
    floor = floors().get(minor)
    if floor is None:
        known = ", ".join(sorted(floors(), key=lambda k: tuple(map(int, k.split(".")))))
        return DriverGate(False, minor, node_driver, None,
                          f"CUDA {minor} is not in lucepatch/data/cuda_drivers.toml (known: {known}): its minimum "
                          "driver is unknown, so lucepatch does not guess; add the row from NVIDIA's release notes")
    if node_driver < floor.min_driver:
        fits = [f.cuda for f in floors().values() if f.min_driver <= node_driver]
        best = max(fits, key=lambda k: tuple(map(int, k.split(".")))) if fits else None
        return DriverGate(False, minor, node_driver, floor.min_driver,
                          f"a CUDA {minor} image needs driver >= {floor.min_driver} (NVIDIA_REQUIRE_CUDA=cuda>={minor}; "
                          f"{floor.source}); the node has {node_driver}, so the container would not start. "
                          + (f"Use a CUDA <= {best} base (the profiles' 13.0 bases) or upgrade the node's driver"
                             if best else "Upgrade the node's driver"))
    return DriverGate(True, minor, node_driver, floor.min_driver,
                      f"CUDA {minor} starts on driver {node_driver} (needs >= {floor.min_driver})")


def require(image_cuda: str, node_driver: DriverVersion) -> DriverGate:
    """check(), raising CheckFailed (exit 1) when the image would not start on the node."""
    g = check(image_cuda, node_driver)
    if not g.ok:
        raise CheckFailed(f"refused: {g.message}")
    return g

