"""Where joules come from. The only code (with wattlab.power) that talks to NVML or sysfs."""
