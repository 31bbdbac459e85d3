"""Base classes, decorators and the serve loop of a component.

A component is one node's computation. Subclass :class:`Producer`, :class:`Processor` or
:class:`Consumer` (or decorate a function) and call :func:`run` from your program's main; the
worker that started the program (``videoflow-worker exec -- <your command>``) does the rest.

The node's params (``VF_NODE_PARAMS_JSON``, also sent in ``Open``) are passed to the class as
keyword arguments, as the Python reference passes them to its node classes.
"""

import inspect
import json
import os
import signal
import socket
import sys
import time
import traceback

from . import _protocol as p
from .payloads import decode_payload, encode_payload, from_value, to_value

__version__ = "0.1.0"

#: Return this from ``Producer.next`` (or raise ``StopIteration``) at the end of input.
END = object()

#: What :func:`serve` announces as ``Hello.max_in_flight`` by default: how many requests the
#: worker may keep outstanding. The component still computes one at a time (one thread); what
#: overlaps is everything around it — the worker encodes and writes the next requests and
#: publishes the previous outputs while this process computes, and this process reads every
#: queued request with one ``recv`` and answers several with one ``send``.
MAX_IN_FLIGHT = 8

#: Answers computed back to back are sent together (up to half of ``max_in_flight`` per
#: send), but none waits longer than about this for company (seconds), and a request that
#: took longer than this to compute is answered at once: a slow ``process`` answers each
#: input as soon as it is done.
_FLUSH_AFTER = 0.0005


class ComponentError(Exception):
    """A failure with a videoflow code, remedy and disposition.

    ``disposition`` is ``"poison"`` (dead-letter the input, never retry), ``"transient"``
    (retry it), ``"worker_fatal"`` (hand it back and restart the worker), or ``""`` (the
    node's ``onError`` decides). Any other exception travels as ``"<Type>: <message>"``
    with no code, so ``onError`` decides, as in the Python reference.
    """

    code = "VF_UNKNOWN"
    disposition = ""

    def __init__(self, message, code=None, remedy="", disposition=None):
        super(ComponentError, self).__init__(message)
        self.message = str(message)
        if code is not None:
            self.code = code
        self.remedy = remedy
        if disposition is not None:
            self.disposition = disposition


class Poison(ComponentError):
    """The input itself is bad: dead-letter it (``VF_POISON``)."""

    code = "VF_POISON"
    disposition = "poison"


class Transient(ComponentError):
    """Something outside the component blipped: retry the input (``VF_TRANSIENT``)."""

    code = "VF_TRANSIENT"
    disposition = "transient"


class WorkerFatal(ComponentError):
    """This process cannot go on: hand the input back, restart (``VF_WORKER_FATAL``)."""

    code = "VF_WORKER_FATAL"
    disposition = "worker_fatal"


class EnvelopeInfo(object):
    """What one input envelope looked like: trace id, seq, event time, metadata, replica."""

    __slots__ = ("trace_id", "seq", "event_ts", "metadata", "replica_id")

    def __init__(self, info):
        self.trace_id = info.trace_id
        self.seq = info.seq
        self.event_ts = info.event_ts if info.HasField("event_ts") else None
        self.metadata = {k: from_value(v) for k, v in info.metadata.items()}
        self.replica_id = info.replica_id

    def __repr__(self):
        return "EnvelopeInfo(trace_id=%r, seq=%d)" % (self.trace_id, self.seq)


class Context(object):
    """The node's identity and the current group, plus the one-shot output settings.

    ``input_info`` maps each parent to an :class:`EnvelopeInfo`, a list of them (a time-join
    collect parent) or ``None`` (a parent missing from a quorum group).
    """

    def __init__(self, node=None):
        self.flow_id = node.flow_id if node else ""
        self.run_id = node.run_id if node else ""
        self.node_name = node.node_name if node else ""
        self.kind = node.kind if node else ""
        self.replica_id = node.replica_id if node else 0
        self.nb_tasks = node.nb_tasks if node else 1
        self.parents = list(node.parents) if node else []
        self.input_key = None
        self.input_info = {}
        self._partition_key = None
        self._event_ts = None

    def first(self):
        """The first parent's envelope info (what a single-input node reads), or ``None``."""
        for info in self.input_info.values():
            if isinstance(info, EnvelopeInfo):
                return info
        return None

    def set_output_partition_key(self, key):
        """LOOP-8: the partition key of the next output (``None`` clears it)."""
        self._partition_key = key

    def set_output_event_timestamp(self, ts):
        """LOOP-9: the event time (epoch seconds) of the next output."""
        self._event_ts = float(ts)


class _Node(object):
    #: Set by the SDK before ``open``.
    ctx = None

    def open(self):
        """Acquire resources (load models, open files) before the first call."""

    def close(self):
        """Release resources; called once at the end."""


class Producer(_Node):
    """A node without parents: ``next()`` returns the next item, or ``END`` at the end."""

    def next(self):
        raise NotImplementedError


class Processor(_Node):
    """A node with parents and children: ``process(*inputs)`` returns one output."""

    def process(self, *inputs):
        raise NotImplementedError


class Consumer(_Node):
    """A node without children: ``consume(*inputs)`` applies an effect, durably, then returns."""

    def consume(self, *inputs):
        raise NotImplementedError


def _bind(fn, params):
    params = _accepted(fn, params)
    return lambda *inputs: fn(*inputs, **params)


def processor(fn):
    """Decorates ``fn(*inputs, **params) -> output`` into a :class:`Processor` class."""

    class _Fn(Processor):
        def __init__(self, **params):
            self._call = _bind(fn, params)

        def process(self, *inputs):
            return self._call(*inputs)

    _Fn.__name__ = _Fn.__qualname__ = fn.__name__
    _Fn.__doc__ = fn.__doc__
    return _Fn


def consumer(fn):
    """Decorates ``fn(*inputs, **params)`` into a :class:`Consumer` class."""

    class _Fn(Consumer):
        def __init__(self, **params):
            self._call = _bind(fn, params)

        def consume(self, *inputs):
            self._call(*inputs)

    _Fn.__name__ = _Fn.__qualname__ = fn.__name__
    _Fn.__doc__ = fn.__doc__
    return _Fn


def producer(fn):
    """Decorates a generator function ``fn(**params)`` into a :class:`Producer` class."""

    class _Fn(Producer):
        def __init__(self, **params):
            self._params = params
            self._items = None

        def open(self):
            self._items = iter(fn(**self._params))

        def next(self):
            return next(self._items, END)

    _Fn.__name__ = _Fn.__qualname__ = fn.__name__
    _Fn.__doc__ = fn.__doc__
    return _Fn


# Flags the control planes put into a consumer's params that a class need not accept.
_RUNTIME_PARAMS = ("idempotent", "metadata")


def _accepted(fn, params):
    """``params`` without the runtime flags ``fn`` does not take."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return params
    if any(x.kind == x.VAR_KEYWORD for x in sig.parameters.values()):
        return params
    return {
        k: v for k, v in params.items() if k not in _RUNTIME_PARAMS or k in sig.parameters
    }


def _construct(cls, params):
    return cls(**_accepted(cls, params))


def _inputs(ctx, wire_inputs):
    values = []
    ctx.input_info = {}
    for inp in wire_inputs:
        kind = inp.WhichOneof("kind")
        if kind == "present":
            values.append(decode_payload(inp.present.payload_type, inp.present.data))
            ctx.input_info[inp.parent] = (
                EnvelopeInfo(inp.info) if inp.HasField("info") else None
            )
        elif kind == "collected":
            values.append(
                [decode_payload(x.payload_type, x.data) for x in inp.collected.items]
            )
            ctx.input_info[inp.parent] = [EnvelopeInfo(i) for i in inp.collected.infos]
        else:
            values.append(None)
            ctx.input_info[inp.parent] = None
    return values


def _fill_output(result, ctx, item):
    out = result.output
    payload_type, data = encode_payload(item)
    out.payload.payload_type = payload_type
    out.payload.data = data
    if ctx._partition_key is not None:
        out.partition_key.CopyFrom(to_value(ctx._partition_key))
    if ctx._event_ts is not None:
        out.event_ts = ctx._event_ts
    ctx._partition_key = None
    ctx._event_ts = None


def _fill_error(result, exc):
    err = result.error
    if isinstance(exc, ComponentError):
        err.code = exc.code or ""
        err.message = exc.message
        err.remedy = exc.remedy or ""
        err.disposition = exc.disposition or ""
    else:
        err.message = "%s: %s" % (type(exc).__name__, exc)
    sys.stderr.write(traceback.format_exc())
    sys.stderr.flush()


def _visible_devices():
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        value = os.environ.get(var)
        if value:
            return [d.strip() for d in value.split(",") if d.strip()]
    return []


def serve(node_class, sock, name=None, max_in_flight=None):
    """Speaks the protocol on a connected socket until Close or the worker goes away.

    ``node_class(**params)`` builds the node at Open (runtime flags such as ``idempotent``
    are dropped unless the class takes them). ``max_in_flight`` is announced in Hello
    (default :data:`MAX_IN_FLIGHT`, or ``VF_COMPONENT_MAX_IN_FLIGHT``; 1 asks the worker for
    one request at a time). Requests are answered in the order they arrive. Returns the
    process exit status.
    """
    if max_in_flight is None:
        max_in_flight = int(os.environ.get("VF_COMPONENT_MAX_IN_FLIGHT") or MAX_IN_FLIGHT)
    hello = p.ComponentMessage()
    h = hello.hello
    h.protocol_versions.extend(p.PROTOCOL_VERSIONS)
    h.pid = os.getpid()
    h.visible_devices.extend(_visible_devices())
    h.sdk = "videoflow-sdk-python/" + __version__
    h.component = name or getattr(node_class, "__name__", "component")
    h.max_in_flight = max(1, int(max_in_flight))
    p.write_frame(sock, hello)
    reader = p.FrameReader(sock)
    # Half a window of answers per send: the worker refills the other half meanwhile.
    flush_count = max(1, h.max_in_flight // 2)
    unsent = []  # answers computed and not sent yet
    unsent_since = 0.0
    state = _State()
    while True:
        msg = reader.next_buffered(p.WorkerMessage)
        if msg is None:
            # Nothing more to compute now: answer before waiting for more.
            if unsent:
                sock.sendall(b"".join(unsent))
                del unsent[:]
            if not reader.fill():
                return 0  # the worker went away: nothing left to do
            continue
        started = time.perf_counter()
        which, reply = _handle(state, node_class, msg)
        done = time.perf_counter()
        if not unsent:
            unsent_since = done
        unsent.append(p.frame_bytes(reply))
        if which == "close":
            sock.sendall(b"".join(unsent))
            return 0
        # Hold an answer for company only while requests compute fast (the next one is
        # likely fast too): a slow node answers every input as soon as it is done.
        if (
            len(unsent) >= flush_count
            or done - started >= _FLUSH_AFTER
            or done - unsent_since >= _FLUSH_AFTER
        ):
            sock.sendall(b"".join(unsent))
            del unsent[:]


class _State(object):
    """The node and its context across requests."""

    __slots__ = ("node", "ctx")

    def __init__(self):
        self.node = None
        self.ctx = Context()


def _handle(state, node_class, msg):
    """One request's answer; every failure is answered, never fatal here."""
    which = msg.WhichOneof("body")
    reply = p.ComponentMessage()
    result = reply.result
    result.request_id = msg.request_id
    ctx = state.ctx
    try:
        if which == "process":
            ctx.input_key = msg.process.input_key
            inputs = _inputs(ctx, msg.process.inputs)
            _fill_output(result, ctx, state.node.process(*inputs))
        elif which == "consume":
            ctx.input_key = msg.consume.input_key
            inputs = _inputs(ctx, msg.consume.inputs)
            state.node.consume(*inputs)
        elif which == "next":
            try:
                item = state.node.next()
            except StopIteration:
                item = END
            if item is END:
                result.end_of_input = True
            else:
                _fill_output(result, ctx, item)
        elif which == "open":
            state.ctx = ctx = Context(msg.open.node)
            params = json.loads(msg.open.params_json or "{}")
            state.node = _construct(node_class, params)
            state.node.ctx = ctx
            state.node.open()
        elif which == "close":
            if state.node is not None:
                state.node.close()
        else:
            raise ComponentError("unknown request %r" % which, code="VF_NODE_CONTRACT")
    except Exception as exc:  # every failure is answered, never fatal here
        result.ClearField("output")
        result.end_of_input = False
        _fill_error(result, exc)
    return which, reply


def run(node_class, name=None):
    """Runs ``node_class`` as this program's component; returns only via ``sys.exit``.

    The program must have been started by ``videoflow-worker`` (which sets
    ``VF_COMPONENT_SOCKET``). SIGINT is ignored: the worker decides when the component ends.
    """
    path = os.environ.get("VF_COMPONENT_SOCKET")
    if not path:
        sys.stderr.write(
            "VF_COMPONENT_SOCKET is not set: run this program through the videoflow worker "
            "(a Flow node with component.exec, or `videoflow-worker exec -- <command>`).\n"
        )
        sys.exit(2)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # pragma: no cover - not the main thread
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    try:
        code = serve(node_class, sock, name)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        code = 0  # the worker went away; it owns what happens next
    finally:
        sock.close()
    sys.exit(code)
