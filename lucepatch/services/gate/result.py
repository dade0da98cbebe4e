"""What one gate run produces: steps (with sub-cases) per target, and their JSON form (cached)."""

from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, SKIP, WARN = "pass", "fail", "skip", "warn"


@dataclass
class Step:
    name: str
    status: str
    detail: str = ""
    seconds: float = 0.0
    gate: bool = True  # part of the pinned-base gate (canary is not)
    cases: list[dict] = field(default_factory=list)  # sub-results (scenarios, probes)

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail, "seconds": round(self.seconds, 2),
                "gate": self.gate, "cases": self.cases}


@dataclass
class TargetResult:
    target: str
    key: str
    steps: list[Step] = field(default_factory=list)
    cached: bool = False
    evidence: str | None = None
    skipped: str | None = None  # why the target was not gated (`ci --all` without its checkout)

    @property
    def gate(self) -> str:
        if self.skipped:
            return SKIP
        return FAIL if any(s.gate and s.status == FAIL for s in self.steps) else PASS

    @property
    def canary(self) -> str:
        c = [s for s in self.steps if s.name == "canary"]
        return c[0].status if c else SKIP

    def to_json(self) -> dict:
        return {"target": self.target, "key": self.key, "cached": self.cached, "gate": self.gate,
                "canary": self.canary, "evidence": self.evidence, "skipped": self.skipped,
                "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, d: dict) -> "TargetResult":
        r = cls(d["target"], d["key"], cached=True, evidence=d.get("evidence"), skipped=d.get("skipped"))
        r.steps = [Step(s["name"], s["status"], s["detail"], s["seconds"], s["gate"], s["cases"]) for s in d["steps"]]
        return r
