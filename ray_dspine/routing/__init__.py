"""Request placement for ray-dspine pools: pure filters, scorers, picker, baselines and traffic policy.

Nothing here imports `ray` except `ray_dspine.routing.ray_router` (import that module explicitly).
"""

from ray_dspine.routing.baselines.cache_aware import CacheAwarePolicy
from ray_dspine.routing.baselines.least_load import LeastLoadPolicy
from ray_dspine.routing.config import (
    ArmSplit,
    CacheAwareConfig,
    EstimatorConfig,
    ReportsConfig,
    RouterConfig,
    TrafficConfig,
    TrafficRule,
)
from ray_dspine.routing.fingerprint import conversation_text, prefix_hashes, session_fingerprint
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.policies import RoutingPolicy, build_policy
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.registry import stage_types
from ray_dspine.routing.session_table import SessionTable
from ray_dspine.routing.traffic import assign, reasoning_level_of, session_key
from ray_dspine.routing.types import Decision, ReplicaView, RequestView

__all__ = [
    "ArmSplit",
    "CacheAwareConfig",
    "CacheAwarePolicy",
    "EstimatorConfig",
    "Decision",
    "LeastLoadPolicy",
    "PrefixIndex",
    "ReplicaView",
    "ReportsConfig",
    "RequestView",
    "RouterConfig",
    "RoutingPipeline",
    "RoutingPolicy",
    "SessionTable",
    "TrafficConfig",
    "TrafficRule",
    "assign",
    "build_policy",
    "conversation_text",
    "prefix_hashes",
    "reasoning_level_of",
    "session_fingerprint",
    "session_key",
    "stage_types",
]
