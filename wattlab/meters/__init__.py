"""Where joules come from. The only code (with wattlab.power_limits) that talks to NVML or sysfs."""
