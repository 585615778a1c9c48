"""Engines behind one protocol: embedded (CPU), simulated (twin), sglang (GPU)."""
