"""vLLM ROCm on a Docker host over SSH: VllmRocmServer, its inputs, scripts and Caddyfile."""
