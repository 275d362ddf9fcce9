"""Gradient compression for allreduce (Horovod's hvd.Compression).

Compression.none sends tensors as they are; Compression.fp16 sends floating
point tensors as float16 and restores their dtype afterwards (half the bytes,
about 3 decimal digits kept). DistributedOptimizer hands fp16 to the runtime,
which converts inside its fusion buckets.

Example::

    opt = hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)
"""
import torch


class Compressor:
    """Turns a tensor into its wire form and back: compress(t) -> (t', ctx); decompress(t', ctx) -> t."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None else tensor


class Compression:
    """The compressors: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor
