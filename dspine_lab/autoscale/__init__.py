"""Autoscaling studies: the baselines the policy is compared with, the simulated day benchmark
(`ray-dspine bench autoscaling`) and the tuner (`ray-dspine tune autoscaling`)."""
