"""The component protocol's messages and framing (``videoflow.component.v1``).

Why message classes from a descriptor set instead of generated ``_pb2`` modules: generated
code pins the protobuf runtime it was generated for, while a ``FileDescriptorSet`` works with
every protobuf release since 3.20. The set (``component_v1.binpb``) is produced by the Rust
build from ``core/proto`` and a test keeps this copy identical. The classes live in a private
descriptor pool, so they never clash with another package registering ``videoflow.v1``
(the reference ``videoflow`` package does).
"""

import os
import struct

from google.protobuf import descriptor_pb2, descriptor_pool

try:  # protobuf >= 4.21
    from google.protobuf.message_factory import GetMessageClass as _get_class
except ImportError:  # pragma: no cover - older protobuf
    from google.protobuf import message_factory as _message_factory

    _factory = _message_factory.MessageFactory()

    def _get_class(desc):
        return _factory.GetPrototype(desc)


PROTOCOL_VERSIONS = (1,)
MAX_FRAME_BYTES = 1 << 30

with open(os.path.join(os.path.dirname(__file__), "component_v1.binpb"), "rb") as _f:
    DESCRIPTOR_SET = _f.read()

_pool = descriptor_pool.DescriptorPool()
for _file in descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET).file:
    _pool.Add(_file)


def _cls(name):
    return _get_class(_pool.FindMessageTypeByName(name))


# videoflow.v1 payloads and values
Tensor = _cls("videoflow.v1.Tensor")
Frame = _cls("videoflow.v1.Frame")
Detections = _cls("videoflow.v1.Detections")
Tracks = _cls("videoflow.v1.Tracks")
Value = _cls("videoflow.v1.Value")
ListValue = _cls("videoflow.v1.ListValue")
MapValue = _cls("videoflow.v1.MapValue")
# videoflow.component.v1
Hello = _cls("videoflow.component.v1.Hello")
WorkerMessage = _cls("videoflow.component.v1.WorkerMessage")
ComponentMessage = _cls("videoflow.component.v1.ComponentMessage")
Result = _cls("videoflow.component.v1.Result")
Output = _cls("videoflow.component.v1.Output")


def write_frame(sock, message):
    """Sends ``message`` as one frame: a 4-byte big-endian length, then its bytes."""
    data = message.SerializeToString()
    if len(data) > MAX_FRAME_BYTES:
        raise ValueError("message of %d bytes exceeds the frame limit" % len(data))
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(sock, n, allow_eof=False):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            if allow_eof and got == 0:
                return None
            raise EOFError("the worker closed the connection mid-frame")
        got += k
    return bytes(buf)


def read_frame(sock, cls):
    """Reads one frame as ``cls``; ``None`` when the worker closed the connection."""
    header = _recv_exact(sock, 4, allow_eof=True)
    if header is None:
        return None
    (length,) = struct.unpack(">I", header)
    if length > MAX_FRAME_BYTES:
        raise ValueError("frame of %d bytes exceeds the frame limit" % length)
    msg = cls()
    msg.ParseFromString(_recv_exact(sock, length) if length else b"")
    return msg


_HEADER = struct.Struct(">I")


def frame_bytes(message):
    """``message`` as one frame's bytes: the 4-byte big-endian length, then the message."""
    data = message.SerializeToString()
    if len(data) > MAX_FRAME_BYTES:
        raise ValueError("message of %d bytes exceeds the frame limit" % len(data))
    return _HEADER.pack(len(data)) + data


class FrameReader(object):
    """Buffered frame reading: one ``recv`` takes in every request the worker has written.

    Why: a worker that pipelines (``Hello.max_in_flight`` > 1) writes the next requests while
    the component computes, so they are usually already in the socket when the component
    looks; reading them in one system call instead of two per frame is most of what the
    component side of the boundary costs besides the computation itself.
    """

    CHUNK = 256 * 1024

    def __init__(self, sock):
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0

    def next_buffered(self, cls):
        """The next complete frame already received, as ``cls``; ``None`` when there is none."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        (length,) = _HEADER.unpack_from(buf, pos)
        if length > MAX_FRAME_BYTES:
            raise ValueError("frame of %d bytes exceeds the frame limit" % length)
        end = pos + 4 + length
        if len(buf) < end:
            return None
        msg = cls()
        msg.ParseFromString(bytes(buf[pos + 4 : end]))
        if end == len(buf):
            del buf[:]
            self._pos = 0
        else:
            self._pos = end
        return msg

    def fill(self):
        """Waits for more bytes; ``False`` when the worker closed the connection between
        frames (``EOFError`` when it closed mid-frame)."""
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        data = self._sock.recv(self.CHUNK)
        if not data:
            if self._buf:
                raise EOFError("the worker closed the connection mid-frame")
            return False
        self._buf += data
        return True
