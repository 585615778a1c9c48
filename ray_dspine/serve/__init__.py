"""Ray Serve glue: the OpenAI-compatible ingress, the engine-replica deployment and the app builder."""
