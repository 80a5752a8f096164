"""The structs perflab hands cuLaunchKernelEx, laid out as cuda.h lays them out (64-bit)."""
import ctypes

from perflab.kernels import LaunchAttribute, LaunchConfig


def test_launch_structs_match_cuda_h():
    assert ctypes.sizeof(LaunchAttribute) == 72 and LaunchAttribute.value.offset == 8
    offsets = {name: getattr(LaunchConfig, name).offset for name, _ in LaunchConfig._fields_}
    assert offsets == {"grid": 0, "block": 12, "shared_mem": 24, "stream": 32, "attrs": 40, "num_attrs": 48}
    assert ctypes.sizeof(LaunchConfig) == 56
