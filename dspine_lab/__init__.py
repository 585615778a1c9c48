"""The lab: studies and simulators built on the serving core (`ray_dspine`), which never imports it.

- `dspine_lab.bench`: the routing benchmark on simulated replicas (live and virtual), its figures and
  sweeps, and the prefill floor measurements.
- `dspine_lab.sim`: the day simulator of a pool under an autoscaling policy.
- `dspine_lab.autoscale`: the autoscaling baselines, the day benchmark and the policy tuner.
- `dspine_lab.engines`: paced prefill, the engine wrapper registered as "prefill_pacing".

Commands reach `ray-dspine` through the entry point group `ray_dspine.commands` (pyproject.toml).
"""
