"""The embedded CPU engine: SmolLM2-135M-Instruct in PyTorch with n-gram speculative decoding."""
