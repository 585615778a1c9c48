"""Discrete-event simulation of a pool of simulated replicas over a day, for autoscaling studies."""

from dspine_lab.sim.config import PoolSimConfig, RayControls, SimConfig, DayTraffic
from dspine_lab.sim.results import DayResult
from dspine_lab.sim.run import load_day, simulate_day

__all__ = ["DayResult", "PoolSimConfig", "RayControls", "SimConfig", "DayTraffic", "load_day", "simulate_day"]
