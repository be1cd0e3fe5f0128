"""PTX shipped with the package (generated from the .cu files by `python -m rgpu.kernels.build`)."""

from importlib import resources


def load(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()
