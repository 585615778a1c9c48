"""Paced prefill: the engine wrapper the core finds as "prefill_pacing" (entry point group
`ray_dspine.engine_wrappers`)."""
