"""Routing studies on simulated replicas (`ray-dspine bench routing`) and prefill floor measurements."""
