"""Imports every built-in dataset module so that each registers itself."""
from ndebench.datasets import images, sepsis, speech_commands, synthetic, uea  # noqa: F401
