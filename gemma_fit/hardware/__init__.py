"""Stage 4, the hardware: GPUSpec and Hardware (one machine), hardware_db and machine files, --gpu/--hardware
selection, probes."""
