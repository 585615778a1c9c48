"""Discrete-event simulation of a pool of simulated replicas over a day, for autoscaling studies."""

from ray_dspine.sim.config import PoolSimConfig, RayControls, SimConfig, TrafficConfig
from ray_dspine.sim.results import DayResult
from ray_dspine.sim.run import load_day, simulate_day

__all__ = ["DayResult", "PoolSimConfig", "RayControls", "SimConfig", "TrafficConfig", "load_day", "simulate_day"]
