"""The simulated engine: a calibrated performance twin (no weights) for real and virtual time."""

from ray_dspine.engines.simulated.config import SimDrafter, SimulatedEngineConfig
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.engine import SimulatedEngine, to_sim_request
from ray_dspine.engines.simulated.profile import SimProfile, available_profiles, load_profile
from ray_dspine.engines.simulated.request import SimCounters, SimEvent, SimRequest

__all__ = [
    "SimCounters",
    "SimDrafter",
    "SimEvent",
    "SimProfile",
    "SimReplicaCore",
    "SimRequest",
    "SimulatedEngine",
    "SimulatedEngineConfig",
    "available_profiles",
    "load_profile",
    "to_sim_request",
]
