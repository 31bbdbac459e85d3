"""Python objects <-> the wire's ``(payload_type, bytes)`` and ``videoflow.v1.Value``.

What a node receives and may return:

- a numpy array          <-> ``videoflow.v1.Tensor`` (when numpy is installed; else the
  ``Tensor`` message itself)
- ``None``, bool, int, float, str, bytes, lists/tuples, str-keyed dicts (tensors may nest
  inside) <-> ``videoflow.v1.Value``
- a ``Frame``, ``Detections`` or ``Tracks`` message (from ``videoflow_sdk``) <-> itself
- ``RawPayload(payload_type, data)`` <-> any other message type, carried verbatim: the worker
  never re-encodes payloads, so your own protobuf types pass through untouched. Any protobuf
  message instance you return is sent under its full name.
"""

from . import _protocol as p

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None

TENSOR_TYPE = "videoflow.v1.Tensor"
VALUE_TYPE = "videoflow.v1.Value"
_MESSAGES = {
    "videoflow.v1.Frame": p.Frame,
    "videoflow.v1.Detections": p.Detections,
    "videoflow.v1.Tracks": p.Tracks,
}
_INT64 = (-(1 << 63), (1 << 63) - 1)
# dtype <-> its wire name, memoised: both directions cost microseconds per message otherwise.
_DTYPE_NAMES = {}
_DTYPES = {}


class RawPayload(object):
    """A payload kept as its wire form: a fully-qualified type name and encoded bytes."""

    __slots__ = ("payload_type", "data")

    def __init__(self, payload_type, data):
        self.payload_type = payload_type
        self.data = bytes(data)

    def __eq__(self, other):
        return (
            isinstance(other, RawPayload)
            and other.payload_type == self.payload_type
            and other.data == self.data
        )

    def __repr__(self):
        return "RawPayload(%r, <%d bytes>)" % (self.payload_type, len(self.data))


def numpy_to_tensor(array):
    """A numpy array as a ``Tensor`` message: ``str(dtype)``, shape, C-order little-endian bytes."""
    if _np is None:
        raise RuntimeError("numpy is not installed")
    a = _np.ascontiguousarray(array)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    dtype = a.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)  # str(dtype) costs microseconds: once per dtype
    return p.Tensor(shape=a.shape, dtype=name, data=a.tobytes())


def tensor_to_numpy(tensor):
    """A ``Tensor`` message as a numpy array (read-only view of the bytes; ``.copy()`` to write)."""
    if _np is None:
        raise RuntimeError("numpy is not installed")
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        dtype = _DTYPES[tensor.dtype] = _np.dtype(tensor.dtype).newbyteorder("<")
    return _np.frombuffer(tensor.data, dtype=dtype).reshape(tuple(tensor.shape))


def _tensor_out(t):
    return tensor_to_numpy(t) if _np is not None else t


def to_value(obj):
    """A Python object as a ``videoflow.v1.Value``."""
    v = p.Value()
    if obj is None:
        v.null_value = 0
    elif isinstance(obj, bool):
        v.bool_value = obj
    elif isinstance(obj, int):
        if not _INT64[0] <= obj <= _INT64[1]:
            raise OverflowError("int %d does not fit 64 bits" % obj)
        v.int_value = obj
    elif isinstance(obj, float):
        v.double_value = obj
    elif isinstance(obj, str):
        v.string_value = obj
    elif isinstance(obj, (bytes, bytearray)):
        v.bytes_value = bytes(obj)
    elif isinstance(obj, (list, tuple)):
        v.list_value.SetInParent()
        for item in obj:
            v.list_value.values.append(to_value(item))
    elif isinstance(obj, dict):
        v.map_value.SetInParent()
        for key, item in obj.items():
            if not isinstance(key, str):
                raise TypeError("map keys must be str, got %r" % (key,))
            v.map_value.fields[key].CopyFrom(to_value(item))
    elif _np is not None and isinstance(obj, _np.ndarray):
        v.tensor_value.CopyFrom(numpy_to_tensor(obj))
    elif _np is not None and isinstance(obj, _np.generic):
        return to_value(obj.item())
    elif isinstance(obj, p.Tensor):
        v.tensor_value.CopyFrom(obj)
    else:
        raise TypeError("cannot send a %s as a videoflow value" % type(obj).__name__)
    return v


def from_value(v):
    """A ``videoflow.v1.Value`` as a Python object."""
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "list_value":
        return [from_value(x) for x in v.list_value.values]
    if kind == "map_value":
        return {k: from_value(x) for k, x in v.map_value.fields.items()}
    if kind == "tensor_value":
        return _tensor_out(v.tensor_value)
    return getattr(v, kind)


def encode_payload(obj):
    """A node's output as ``(payload_type, bytes)``."""
    if isinstance(obj, RawPayload):
        return obj.payload_type, obj.data
    if _np is not None and isinstance(obj, _np.ndarray):
        return TENSOR_TYPE, numpy_to_tensor(obj).SerializeToString()
    descriptor = getattr(obj, "DESCRIPTOR", None)
    if descriptor is not None and hasattr(obj, "SerializeToString"):
        return descriptor.full_name, obj.SerializeToString()
    return VALUE_TYPE, to_value(obj).SerializeToString()


def decode_payload(payload_type, data):
    """``(payload_type, bytes)`` as the object a node receives."""
    if payload_type == TENSOR_TYPE:
        return _tensor_out(p.Tensor.FromString(data))
    if payload_type == VALUE_TYPE:
        return from_value(p.Value.FromString(data))
    cls = _MESSAGES.get(payload_type)
    if cls is not None:
        return cls.FromString(data)
    return RawPayload(payload_type, data)
