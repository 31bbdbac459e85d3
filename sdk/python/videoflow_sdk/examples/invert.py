"""A numpy frame processor: inverts 8-bit frames (``255 - pixels``).

Accepts a bare uint8 tensor (what ``videoflow.rs.producers.SyntheticFrameProducer`` emits) or
a ``videoflow.v1.Frame`` and returns the same kind. Params: ``key_mod`` (optional int >= 1)
stamps each output's partition key with ``seq % key_mod`` of its input, so a partitioned child
sees a stable key per input.

Run by the worker: ``command: [python3, -m, videoflow_sdk.examples.invert]``.
"""

import numpy as np

from videoflow_sdk import Frame, Poison, Processor, numpy_to_tensor, run, tensor_to_numpy


class Invert(Processor):
    def __init__(self, key_mod=None):
        if key_mod is not None and (not isinstance(key_mod, int) or key_mod < 1):
            raise ValueError("key_mod must be an integer >= 1")
        self.key_mod = key_mod

    def process(self, frame):
        if self.key_mod is not None:
            self.ctx.set_output_partition_key(self.ctx.first().seq % self.key_mod)
        if isinstance(frame, np.ndarray):
            return self._invert(frame)
        if isinstance(frame, Frame):
            out = Frame()
            out.CopyFrom(frame)
            out.pixels.CopyFrom(numpy_to_tensor(self._invert(tensor_to_numpy(frame.pixels))))
            return out
        raise Poison("expected a uint8 frame, got %s" % type(frame).__name__)

    @staticmethod
    def _invert(pixels):
        if pixels.dtype != np.uint8:
            raise Poison("expected uint8 pixels, got %s" % pixels.dtype)
        return np.subtract(255, pixels, dtype=np.uint8)


if __name__ == "__main__":
    run(Invert)
