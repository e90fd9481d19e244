"""Stage 4, the hardware: GPUSpec and Machine, hardware_db and machine files, --gpu/--hardware selection, probes."""
