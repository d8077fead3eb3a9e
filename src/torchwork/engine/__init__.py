"""The training step and loop: trainer, precision, devices, callbacks."""
