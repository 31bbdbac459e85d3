"""An identity processor: returns its input unchanged (tensors come back as the same array).

The component boundary benchmark (``scripts/bench``, docs/PERFORMANCE.md) runs it against the
built-in ``videoflow.processors.basic.IdentityProcessor`` to measure what the boundary adds per
message. Run by the worker: ``command: [python3, -m, videoflow_sdk.examples.identity]``.
"""

from videoflow_sdk import processor, run


@processor
def identity(x):
    return x


if __name__ == "__main__":
    run(identity)
