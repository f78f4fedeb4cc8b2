"""Fakes for the hardware seams: a fake ``pynvml`` module and a fake powercap sysfs tree."""
