"""A calibration profile: the step-time coefficients and acceptance figures of one GPU + model.

Profiles are YAML files under `profiles/`; each states the figures it was calibrated from and the
assumptions it makes. `load_profile` is the only function here that reads a file.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.engines.simulated.config import SimDrafter


class CalibrationPoint(BaseModel):
    """The operating point the vendor figures were measured at (what the coefficients must reproduce)."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(ge=1, description="Requests decoded at once in the reference run.")
    context_tokens_per_request: int = Field(
        ge=0, description="Assumed mean context (prompt + output so far) per request at the reference point."
    )
    workload: str = Field(description="Acceptance figure the reference throughputs belong to.")
    autoregressive_output_tok_s: float = Field(gt=0, description="Reference output throughput without a drafter.")


class DecodeModel(BaseModel):
    """t_decode = base_ms + per_running_ms * num_running + per_kv_token_ms * context_tokens."""

    model_config = ConfigDict(extra="forbid")

    base_ms: float = Field(ge=0, description="Fixed cost of one target forward (weights read, launch).")
    per_running_ms: float = Field(ge=0, description="Added per running request (state read/write, sampling).")
    per_kv_token_ms: float = Field(ge=0, description="Added per context token attended (KV bytes / bandwidth).")


class PrefillModel(BaseModel):
    """t_prefill = decode.base_ms + per_token_ms * uncached tokens + per_token_context_ms * attended pairs
    (step_model.py)."""

    model_config = ConfigDict(extra="forbid")

    per_token_ms: float = Field(ge=0, description="Compute per uncached prompt token.")
    per_token_context_ms: float = Field(
        default=0.0,
        ge=0,
        description="Added per uncached token per earlier token of its prompt it attends (causal attention); "
        "0: prefill is linear in the uncached tokens.",
    )


class DrafterProfile(BaseModel):
    """One drafter: block size, its cost on top of a decode step, and its acceptance figures."""

    model_config = ConfigDict(extra="forbid")

    draft_tokens: int = Field(ge=1, le=64, description="D: most tokens one verify step can produce.")
    draft_ms: float = Field(ge=0, description="Fixed cost of drafting one block for the batch.")
    draft_vram_gb: float = Field(ge=0, description="VRAM the drafter holds (weights + its KV).")
    accept_length: dict[str, float] = Field(
        description="Mean tokens per verify step by workload name (aggregate: tokens / verify steps)."
    )
    per_request_cv: float = Field(
        ge=0, le=1, description="Coefficient of variation of a request's verify steps per token, across requests."
    )
    reference_output_tok_s: float = Field(gt=0, description="Vendor throughput at the calibration point.")


class SimProfile(BaseModel):
    """Everything the simulated engine knows about one GPU + model; every figure is simulated."""

    model_config = ConfigDict(extra="forbid")

    name: str
    gpu: str
    model: str
    sources: list[str] = Field(description="Where the calibration figures come from.")
    assumptions: list[str] = Field(description="What the profile assumes beyond its sources.")
    calibration: CalibrationPoint
    decode: DecodeModel
    verify_per_token_ms: float = Field(
        ge=0, description="Added per extra query token a verify step checks: num_running * (D - 1) of them."
    )
    prefill: PrefillModel
    drafters: dict[str, DrafterProfile] = Field(description="Keyed by drafter name ('dspine', 'dflash2').")

    def drafter_profile(self, drafter: SimDrafter) -> DrafterProfile | None:
        """The drafter's profile, None for 'none'; KeyError names what the profile has."""
        if drafter == "none":
            return None
        if drafter not in self.drafters:
            raise KeyError(f"profile {self.name!r} has no drafter {drafter!r}; it has {sorted(self.drafters)}")
        return self.drafters[drafter]

    def accept_length_mean(self, drafter: SimDrafter, workload: str) -> float:
        """Mean acceptance length of a drafter on a workload (1.0 without a drafter)."""
        spec = self.drafter_profile(drafter)
        if spec is None:
            return 1.0
        if workload not in spec.accept_length:
            raise KeyError(
                f"profile {self.name!r}, drafter {drafter!r} has no acceptance figure for workload "
                f"{workload!r}; it has {sorted(spec.accept_length)}"
            )
        return min(spec.accept_length[workload], float(spec.draft_tokens))


def profiles_dir() -> Path:
    return Path(str(resources.files("ray_dspine.engines.simulated").joinpath("profiles")))


def available_profiles(directory: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (directory or profiles_dir()).glob("*.yaml"))


def load_profile(name: str, directory: Path | None = None) -> SimProfile:
    """Read `<directory>/<name>.yaml` (default: the shipped profiles) into a validated profile."""
    path = (directory or profiles_dir()) / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no simulated profile {name!r} at {path}; shipped: {available_profiles(directory)}")
    with path.open(encoding="utf-8") as f:
        return SimProfile.model_validate(yaml.safe_load(f))
