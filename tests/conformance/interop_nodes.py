'''
Python twins of the Rust test nodes (`videoflow.rs.*`, worker/src/nodes/testing.rs,
producers.rs, consumers.rs), for the interop flow tests (worker/tests/interop_*.rs, issue
#13): a flow names the Rust class; when the harness runs a node on the reference worker
(`python -m videoflow.worker`, videoflow 1.0.4) it sets `VF_NODE_CLASS` to the twin here
(`interop_nodes.<Class>`, with this folder on `PYTHONPATH`). Same parameters, same outputs
and the same sink record layout, so a test checks a flow the same way whichever runtime ran
each node. Written against the reference's public node API only (`ProducerNode`,
`ConsumerNode`, the `ctx` keyword of `RuntimeContext`).
'''
import hashlib
import json
import os
import time

import numpy as np

from videoflow.core.node import ConsumerNode, ProducerNode


def _to_json(item):
    '''The Rust `input_to_json` rendering: ints and floats kept apart, bytes and tensors summarised.'''
    if item is None or isinstance(item, (bool, int, str)):
        return item
    if isinstance(item, float):
        if item != item or item in (float('inf'), float('-inf')):
            return {'$double': repr(item)}
        return item
    if isinstance(item, (bytes, bytearray)):
        return {'$bytes_hex': bytes(item).hex()}
    if isinstance(item, np.ndarray):
        data = np.ascontiguousarray(item).tobytes()
        return {'$tensor': {
            'shape': list(item.shape),
            'dtype': str(item.dtype),
            'nbytes': len(data),
            'sha256': hashlib.sha256(data).hexdigest(),
            'head_hex': data[:16].hex(),
        }}
    if isinstance(item, (list, tuple)):
        return [_to_json(x) for x in item]
    if isinstance(item, dict):
        return {str(k): _to_json(v) for k, v in item.items()}
    return {'$repr': repr(item)}


def _envelope(info):
    if info is None:
        return None
    return {'trace_id': info.get('trace_id'), 'seq': info.get('seq'), 'event_ts': info.get('event_ts')}


class JsonlSink(ConsumerNode):
    '''
    Twin of `videoflow.rs.consumers.JsonlSink`: one JSON object per group with `node`,
    `replica`, `trace_id`/`seq`/`event_ts` of the first present parent, `input_key`,
    `arrival_ts`, `value` and, for several parents, `parents`. `producer_replica` is null:
    1.0.4's `RuntimeContext.input_info` does not expose the envelope's `replica_id`.
    '''

    def __init__(self, path, **kwargs):
        self._path = path
        super(JsonlSink, self).__init__(**kwargs)

    def open(self):
        folder = os.path.dirname(self._path)
        if folder:
            os.makedirs(folder, exist_ok = True)

    def consume(self, *items, ctx):
        info = ctx.input_info or {}
        present = [i for i in info.values() if i is not None]
        first = present[0] if present else None
        record = {
            'node': ctx.node_name,
            'replica': ctx.replica_id,
            'trace_id': first.get('trace_id') if first else None,
            'seq': first.get('seq') if first else None,
            'event_ts': first.get('event_ts') if first else None,
            'producer_replica': None,
            'input_key': ctx.input_key,
            'arrival_ts': time.time(),
            'value': _to_json(items[0]) if len(items) == 1 else [_to_json(x) for x in items],
        }
        if len(info) > 1:
            record['parents'] = {name: _envelope(i) for name, i in info.items()}
        line = json.dumps(record) + '\n'
        # One write per record, straight to the kernel (as the Rust sink): a SIGKILL after
        # the ack never loses a line.
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


class TickProducer(ProducerNode):
    '''Twin of `videoflow.rs.producers.TickProducer` (unpaced): ticks `1..=count` at event time `start_ts + i × period_ms / 1000`, skipping every `skip_every`-th.'''

    def __init__(self, count = None, period_ms = 100.0, start_ts = 1_700_000_000.0, skip_every = 0, **kwargs):
        self._count = count
        self._period_ms = float(period_ms)
        self._start_ts = float(start_ts)
        self._skip_every = int(skip_every)
        self._tick = 0
        super(TickProducer, self).__init__(**kwargs)

    def next(self, ctx):
        while True:
            i = self._tick + 1
            if self._count is not None and i > self._count:
                raise StopIteration()
            self._tick = i
            if self._skip_every > 0 and i % self._skip_every == 0:
                continue
            ctx.set_event_timestamp(self._start_ts + i * (self._period_ms / 1000.0))
            return i


class FailingProducer(ProducerNode):
    '''Twin of `videoflow.rs.producers.FailingProducer`: emits `0..emit`, then raises `ValueError(message)`.'''

    def __init__(self, emit = 0, message = 'FailingProducer: the source failed', **kwargs):
        self._emit = int(emit)
        self._message = message
        self._next = 0
        super(FailingProducer, self).__init__(**kwargs)

    def next(self):
        if self._next >= self._emit:
            raise ValueError(self._message)
        v = self._next
        self._next += 1
        return v


def synthetic_frame(index, width, height, channels):
    '''The bytes of Rust's `synthetic_frame`: the index little-endian, then `(index + i) mod 256`.'''
    n = width * height * channels
    data = ((np.arange(n, dtype = np.uint64) + np.uint64(index & 0xFF)) & np.uint64(0xFF)).astype(np.uint8)
    head = index.to_bytes(8, 'little')
    data[:min(8, n)] = np.frombuffer(head[:min(8, n)], dtype = np.uint8)
    return data.reshape((height, width, channels))


class SyntheticFrameProducer(ProducerNode):
    '''Twin of `videoflow.rs.producers.SyntheticFrameProducer` (unpaced): `count` uint8 frames `height × width × channels`.'''

    def __init__(self, width = 64, height = 48, channels = 3, count = None, fps = -1, **kwargs):
        self._width, self._height, self._channels = int(width), int(height), int(channels)
        self._count = count
        self._index = 0
        super(SyntheticFrameProducer, self).__init__(**kwargs)

    def next(self):
        if self._count is not None and self._index >= self._count:
            raise StopIteration()
        frame = synthetic_frame(self._index, self._width, self._height, self._channels)
        self._index += 1
        return frame
