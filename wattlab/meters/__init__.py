"""Where joules come from. The only code that talks to NVML or sysfs: ``meters.nvml`` is the one
NVML adapter, which ``wattlab.power_limits`` also uses to change GPU limits."""
