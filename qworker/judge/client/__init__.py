"""The worker's side of LLM judges: the HTTP client and the providers' rate-limit headers."""
