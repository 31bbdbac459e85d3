"""videoflow component SDK for Python.

Write a node's computation as a :class:`Producer`, :class:`Processor` or :class:`Consumer`
(or decorate a function with :func:`producer`, :func:`processor`, :func:`consumer`) and call
:func:`run` from the program's main. ``videoflow-worker`` starts the program, hands it one
input group at a time over the component protocol (``videoflow.component.v1``) and keeps
every broker duty. Depends only on ``protobuf``; numpy is optional.
"""

from ._protocol import Detections, Frame, Tensor, Tracks
from .component import (
    END,
    MAX_IN_FLIGHT,
    ComponentError,
    Consumer,
    Context,
    EnvelopeInfo,
    Poison,
    Processor,
    Producer,
    Transient,
    WorkerFatal,
    __version__,
    consumer,
    processor,
    producer,
    run,
    serve,
)
from .payloads import (
    RawPayload,
    decode_payload,
    encode_payload,
    from_value,
    numpy_to_tensor,
    tensor_to_numpy,
    to_value,
)

__all__ = [
    "END",
    "MAX_IN_FLIGHT",
    "ComponentError",
    "Consumer",
    "Context",
    "Detections",
    "EnvelopeInfo",
    "Frame",
    "Poison",
    "Processor",
    "Producer",
    "RawPayload",
    "Tensor",
    "Tracks",
    "Transient",
    "WorkerFatal",
    "__version__",
    "consumer",
    "decode_payload",
    "encode_payload",
    "from_value",
    "numpy_to_tensor",
    "processor",
    "producer",
    "run",
    "serve",
    "tensor_to_numpy",
    "to_value",
]
