"""ray-dspine: a Ray Serve stack for speculative decoding (DSpine, DFlash2) with drafter-aware placement."""
