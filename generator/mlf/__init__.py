"""Reading Model Library Format archives."""

from generator.mlf.model import MlfArchive, ModuleInfo, TensorInfo
from generator.mlf.reader import read_mlf

__all__ = ["MlfArchive", "ModuleInfo", "TensorInfo", "read_mlf"]
