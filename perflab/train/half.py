"""Mixed precision (--dtype bfloat16 | float16) as the tensor cores run it, emulated in float32 on either
backend: the reference for perflab's half-precision step and the study of what it costs in accuracy.

Each GEMM's operands are rounded to the half format, multiplied with FP32 accumulation, and the product
rounded once more (round to nearest even), as a half-precision GEMM with an FP32 accumulator stores it.
Everything else keeps FP32: the master weights and their update, the biases, sigmoid and softmax, the
loss. BFLOAT16 keeps FP32's exponent range; FLOAT16 does not (largest 65504, smallest normal 6.1e-5), so
its gradients are computed from a loss multiplied by a scale and divided by it again before the update:
dynamic loss scaling, as mixed-precision training does it. A step whose gradients overflowed is skipped
and the scale halved; after `GROWTH_INTERVAL` good steps it doubles again; a scale that overflows step
after step ends the run with an error, not an endless run of skipped steps.
"""
from __future__ import annotations

import numpy as np

from perflab.backend import xp_of
from perflab.config import Config, ConfigError
from perflab.train import model
from perflab.train.parallel import DataParallel
from perflab.train.profile import phase

INITIAL_SCALE = {"float16": 2.0 ** 16, "bfloat16": 1.0}  # bfloat16 needs none: FP32's exponent range
GROWTH_INTERVAL = 1000  # good steps before the scale doubles (float16)
MOST_SKIPS = 40  # overflowed steps in a row before the run ends: from 2^16, a scale of 2^-24 by then


class LossScaleError(ConfigError):
    """The loss scale overflowed step after step: the run cannot go on in this precision."""


def overflow_error(kind: str, in_a_row: int, where: str, scale: float) -> LossScaleError:
    return LossScaleError(f"the {kind} gradients overflowed {in_a_row} steps in a row ({where}; loss scale down to "
                          f"{scale:g}): lower --learning-rate, or train in bfloat16 (FP32's range) or float32")


LARGEST = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}  # each format's largest finite value


def check_images(X, kind: str) -> None:
    """ConfigError unless every image value is finite in `kind` (a GPU step holds the images in it): an inf image in
    FP16 would make a NaN gradient that no FP16 gradient shows, which float16's overflow check on one GPU relies on
    (docs/DECISIONS.md, D72); in any precision it would train to NaN. perflab's loaders scale images to [0, 1]."""
    largest = float(xp_of(X).abs(X).max())
    if not largest <= LARGEST[kind]:  # NaN too
        raise ConfigError(f"--dtype {kind}: the images hold {largest:g}, past {kind}'s largest finite value "
                          f"{LARGEST[kind]:g}; scale them (perflab's loaders give [0, 1]) or train in float32")


def round_to(x, kind: str):
    """x (float32) rounded to the nearest value the half format `kind` holds, still float32."""
    xp = xp_of(x)
    if kind == "float16":
        with np.errstate(over="ignore"):
            return x.astype(xp.float16).astype(xp.float32)
    bits = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    bits = (bits + xp.uint32(0x7FFF) + ((bits >> 16) & xp.uint32(1))) & xp.uint32(0xFFFF0000)  # nearest even
    return bits.view(xp.float32).reshape(x.shape)


def to_storage(x, kind: str):
    """x (float32) as perflab's GPU step holds `kind`: float16, or bfloat16's bits in uint16 (CuPy has no
    bfloat16), rounded to nearest even."""
    xp = xp_of(x)
    if kind == "float16":
        with np.errstate(over="ignore"):
            return x.astype(xp.float16)
    return (round_to(x, kind).view(xp.uint32) >> 16).astype(xp.uint16)


def from_storage(x, kind: str):
    """The float32 values of an array `to_storage` made (or a GPU step wrote)."""
    xp = xp_of(x)
    if kind == "float16":
        return x.astype(xp.float32)
    return (x.astype(xp.uint32) << 16).view(xp.float32)


def half_product(kind: str):
    """model.product in `kind`: operands rounded, FP32 accumulation, the product rounded."""
    def matmul(a, b, out=None):
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is the loss scale's to see, not a warning
            result = round_to(model.product(round_to(a, kind), round_to(b, kind)), kind)
        if out is None:
            return result
        out[...] = result
        return out
    return matmul


class LossScale:
    """The dynamic loss scale of a float16 run (a constant 1 for bfloat16, which still skips a step that
    overflowed)."""

    def __init__(self, kind: str, growth_interval: int = GROWTH_INTERVAL, most_skips: int = MOST_SKIPS):
        self.kind, self.value = kind, INITIAL_SCALE[kind]
        self.growth_interval, self.most_skips = growth_interval, most_skips
        self.good = self.skips_in_a_row = self.skipped = 0

    def update(self, finite: bool, where: str) -> bool:
        """After a step's gradients: whether to apply them; the scale follows."""
        if finite:
            self.good += 1
            self.skips_in_a_row = 0
            if self.kind == "float16" and self.good % self.growth_interval == 0:
                self.value *= 2
            return True
        self.skipped += 1
        self.skips_in_a_row += 1
        self.good = 0
        if self.skips_in_a_row >= self.most_skips:
            raise overflow_error(self.kind, self.skips_in_a_row, where, self.value)
        self.value /= 2
        return False


class MixedPrecision(DataParallel):
    """Data parallel (one rank: sequential) with every GEMM in `cfg.dtype` and FP32 masters. The gradient
    buffer is all-reduced scaled, so every rank sees the same overflow and skips the same steps."""

    def __init__(self, cfg: Config, params, X, y, comm):
        super().__init__(cfg, params, X, y, comm)
        self.kind = cfg.dtype
        self.matmul = half_product(self.kind)
        self.scale = LossScale(self.kind)
        self.steps = 0

    def batch(self, index):
        scale = self.scale.value
        batch_loss = self.gradients(index, scale, regularize=False)
        self.steps += 1
        finite = bool(xp_of(self.buffer).isfinite(self.buffer[:-1]).all())
        if not self.scale.update(finite, f"step {self.steps}"):
            return batch_loss  # skipped: the parameters stay as they were
        with phase("step"):
            self.buffer[:-1] /= scale
            model.add_regularization(self.grads, self.params, self.cfg.reg)
            model.sgd_step(self.params, self.grads, self.cfg.learning_rate)
        return batch_loss

    def predict(self, X):
        return model.predict(self.params, X, matmul=self.matmul)
