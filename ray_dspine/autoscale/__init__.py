"""Autoscaling on the cost per completed request: replica statistics, the policy and its Ray adapter.
Nothing here imports ray."""

from ray_dspine.autoscale.capacity_model import Workload, max_rate_per_replica, predict_replica
from ray_dspine.autoscale.config import CostAutoscalingConfig, ReplicaCapacityModel, SloTargets, StatsWindowConfig
from ray_dspine.autoscale.observation import PoolObservation, ReplicaReport, observation_from_context
from ray_dspine.autoscale.policy import ScalingDecision, cost_per_completed_request_usd, decide
from ray_dspine.autoscale.ray_policy import CostAutoscalingPolicy
from ray_dspine.autoscale.stats import STAT_KEYS, ReplicaWindowStats

__all__ = [
    "STAT_KEYS",
    "CostAutoscalingConfig",
    "CostAutoscalingPolicy",
    "ScalingDecision",
    "PoolObservation",
    "ReplicaCapacityModel",
    "ReplicaReport",
    "ReplicaWindowStats",
    "SloTargets",
    "StatsWindowConfig",
    "Workload",
    "cost_per_completed_request_usd",
    "decide",
    "max_rate_per_replica",
    "observation_from_context",
    "predict_replica",
]
