"""Stage 6, speed: decode, prefill, time to first token and load time, from the plan, the estimate and the hardware."""
