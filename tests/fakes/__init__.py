"""Fakes for the hardware seams: a fake NVML backend at the adapter interface (fake_gpu), a
thin fake ``pynvml`` module for the adapter's own tests, a fake powercap sysfs tree, a clock."""
