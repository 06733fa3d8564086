"""The dispatcher's side of LLM judges: gates, adaptive limits, routing, peers."""
