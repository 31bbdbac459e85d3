#!/usr/bin/env python3
'''
The reference side of the differential tests (issue #13): serves the Python reference
implementation, videoflow 1.0.4 from PyPI, over stdin/stdout so the Rust core can be compared
with it case by case.

Protocol: one JSON object per line in, one per line out.

    request  {"op": "<name>", "args": <json>}
    response {"ok": <json>}            or {"err": "<traceback text>"}   (a helper bug)

Every op takes a *batch* (a list of cases) and answers a list of the same length, so a test
pays the process round trip once per few thousand cases. Within a batch, an exception the
*reference* raises for one case is an outcome, not a helper failure: it is reported in that
case's slot as {"raised": "<ExceptionClass>", "message": "<str(e)>"}.

Every answer comes from the reference's own functions (``derive_message_id``,
``NATSMessenger._partition_verdict``, ``TimeGroupAssembler``, ``encode_envelope`` /
``decode_envelope``, ``JoinPolicy`` + ``make_assembler``, ``runtime.scaling``,
``runtime.health.quantile_bounds``); the only code
here converts between the typed JSON descriptions below and native Python values.

Typed value description (shared with core/tests/differential.rs):

    {"t": "null"} | {"t": "bool", "v": b} | {"t": "int", "v": n}
    {"t": "double", "v": "<16 hex digits: the IEEE-754 bits>"}
    {"t": "str", "v": s} | {"t": "bytes", "v": "<hex>"}
    {"t": "list", "v": [desc, ...]} | {"t": "map", "v": [[key, desc], ...]}
    {"t": "tensor", "shape": [...], "dtype": "<numpy str(dtype)>", "data": "<hex>"}

Floats always travel as their bits so no JSON float formatting can blur a comparison.
'''
from __future__ import annotations

import json
import math
import struct
import sys
import traceback
from types import SimpleNamespace

import numpy as np
from google.protobuf.message import Message

import videoflow
from videoflow.backends import allocation, messaging as bmessaging, outcomes
from videoflow.core import policies
from videoflow.messaging import grouping
from videoflow.messaging.nats_messenger import NATSMessenger
from videoflow.runtime import health, scaling
from videoflow.v1 import envelope_pb2
from videoflow.wire import serialization as ser


# -- typed descriptions <-> native values ---------------------------------------------------

def f2h(x: float) -> str:
    return struct.pack('>d', x).hex()


def h2f(h: str) -> float:
    return struct.unpack('>d', bytes.fromhex(h))[0]


def opt_f2h(x):
    return None if x is None else f2h(x)


def opt_h2f(h):
    return None if h is None else h2f(h)


def to_py(d):
    t = d['t']
    if t == 'null':
        return None
    if t in ('bool', 'int', 'str'):
        return d['v']
    if t == 'double':
        return h2f(d['v'])
    if t == 'bytes':
        return bytes.fromhex(d['v'])
    if t == 'list':
        return [to_py(x) for x in d['v']]
    if t == 'map':
        return {k: to_py(v) for k, v in d['v']}
    if t == 'tensor':
        return np.frombuffer(bytes.fromhex(d['data']), dtype = np.dtype(d['dtype'])).reshape(d['shape'])
    raise ValueError(f'unknown typed description {t!r}')


def from_py(v):
    if v is None:
        return {'t': 'null'}
    if isinstance(v, bool):
        return {'t': 'bool', 'v': v}
    if isinstance(v, int):
        return {'t': 'int', 'v': v}
    if isinstance(v, float):
        return {'t': 'double', 'v': f2h(v)}
    if isinstance(v, str):
        return {'t': 'str', 'v': v}
    if isinstance(v, (bytes, bytearray)):
        return {'t': 'bytes', 'v': bytes(v).hex()}
    if isinstance(v, list):
        return {'t': 'list', 'v': [from_py(x) for x in v]}
    if isinstance(v, dict):
        return {'t': 'map', 'v': [[k, from_py(x)] for k, x in v.items()]}
    if isinstance(v, np.ndarray):
        return {'t': 'tensor', 'shape': list(v.shape), 'dtype': str(v.dtype), 'data': v.tobytes().hex()}
    if isinstance(v, ser.RawPayload):
        return {'t': 'raw', 'type': v.payload_type, 'data': bytes(v.data).hex()}
    if isinstance(v, Message):
        return {'t': 'proto', 'type': v.DESCRIPTOR.full_name, 'data': v.SerializeToString().hex()}
    raise TypeError(f'no typed description for {type(v).__name__}')


def raised(e: BaseException) -> dict:
    # videoflow's typed errors append the remedy to str(e); args[0] is the message alone.
    message = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
    remedy = getattr(e, 'remedy', None)
    return {'raised': type(e).__name__, 'message': message, 'remedy': remedy}


# -- ops -------------------------------------------------------------------------------------

def op_hello(_args):
    return {'videoflow': videoflow.__version__, 'python': sys.version.split()[0],
            'protobuf_impl': __import__('google.protobuf.internal.api_implementation',
                                        fromlist = ['Type']).Type()}


def op_msgid(cases):
    # [flow, run, producer, trace_id, seq, kind]
    return [ser.derive_message_id(*c) for c in cases]


def op_py_str(cases):
    # typed description -> str(value), the text 1.0.4 hashes for a partition key
    return [str(to_py(c)) for c in cases]


def op_partition(cases):
    '''
    {"envelope": hex, "partition_by": s, "nb_tasks": n, "invalid": "reject"|"fallback",
     "fallback_partition": p} -> [owner, invalid] from the messenger's own verdict, over the
    metadata the reference decoder produced from Rust's bytes.
    '''
    out = []
    for c in cases:
        try:
            decoded = ser.decode_envelope(bytes.fromhex(c['envelope']))
            fake = SimpleNamespace(
                _partition_by = c['partition_by'], _nb_tasks = c['nb_tasks'], _replica_id = 0,
                _key_policy = policies.PartitionKeyPolicy(c['invalid'], c['fallback_partition']))
            owner, invalid = NATSMessenger._partition_verdict(fake, decoded['trace_id'], decoded['metadata'])
            out.append([owner, invalid])
        except Exception as e:  # noqa: BLE001 — an outcome to compare
            out.append(raised(e))
    return out


class _Handle:
    def ack(self): pass
    def nak(self, *a, **k): pass
    def supersede(self): pass


def op_time_group(cases):
    '''
    {"node": s, "tolerance_ms": hex, "members": [[parent, producer, trace_id, seq, ts_hex], ...]}
    -> {"trace_id", "seq", "event_ts"} of the group the reference's TimeGroupAssembler emits once
    every (sync) parent has contributed, or the exception it raised.
    '''
    out = []
    for c in cases:
        try:
            parents = [m[0] for m in c['members']]
            policy = policies.JoinPolicy(mode = 'time', tolerance_ms = h2f(c['tolerance_ms']))
            asm = grouping.make_assembler(c['node'], parents, policy)
            for parent, producer, trace_id, seq, ts in c['members']:
                entry = grouping.EnvelopeEntry(trace_id = trace_id, seq = seq, event_ts = h2f(ts),
                                               message = None, metadata = None, is_stop_signal = False,
                                               producer_name = producer)
                asm.add(parent, entry, _Handle())
            ready = asm.pop_ready()
            if ready is None:
                out.append({'none': True, 'pending': asm.pending_count()})
            else:
                out.append({'trace_id': ready.trace_id, 'seq': str(ready.seq), 'event_ts': f2h(ready.event_ts)})
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


def error_dict(d):
    if d is None:
        return None
    out = {}
    for k in ('code', 'message', 'remedy', 'disposition', 'node', 'trace_id', 'num_delivered', 'context'):
        if d.get(k) is not None:
            out[k] = d[k]
    return out


def op_encode(cases):
    '''Typed envelope description -> the reference's encode_envelope bytes (hex), or what it raised.'''
    out = []
    for c in cases:
        try:
            payload = None if c['payload'] is None else to_py(c['payload'])
            buf = ser.encode_envelope(
                producer_name = c['producer_name'], flow_id = c['flow_id'], run_id = c['run_id'],
                trace_id = c['trace_id'], seq = c['seq'], msg_type = c['type'],
                metadata = {k: to_py(v) for k, v in c['metadata']}, payload = payload,
                span_id = c['span_id'], parent_span_id = c['parent_span_id'],
                replica_id = c['replica_id'], event_ts = opt_h2f(c['event_ts']),
                error = error_dict(c['error']))
            out.append({'bytes': buf.hex()})
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


def op_decode(cases):
    '''Envelope bytes (hex) -> the reference's decode_envelope result as a typed description.'''
    out = []
    for c in cases:
        try:
            buf = bytes.fromhex(c)
            d = ser.decode_envelope(buf)
            raw = envelope_pb2.Envelope()
            raw.ParseFromString(buf)
            err = d['error']
            out.append({
                'producer_name': d['producer_name'], 'flow_id': d['flow_id'], 'run_id': d['run_id'],
                'trace_id': d['trace_id'], 'seq': d['seq'], 'event_ts': opt_f2h(d['event_ts']),
                'type': d['type'], 'is_stop_signal': d['is_stop_signal'], 'is_abort': d['is_abort'],
                'span_id': d['span_id'], 'parent_span_id': d['parent_span_id'],
                'replica_id': d['replica_id'],
                'metadata': [[k, from_py(v)] for k, v in d['metadata'].items()],
                # A terminator's payload fields are ignored by both decoders.
                'payload_type': '' if d['is_stop_signal'] else raw.payload_type,
                'payload': None if d['is_stop_signal'] else from_py(d['message']),
                'error': None if err is None else {
                    'code': err['code'], 'message': err['message'], 'remedy': err.get('remedy'),
                    'disposition': err.get('disposition'), 'node': err.get('node'),
                    'trace_id': err.get('trace_id'), 'num_delivered': err.get('num_delivered'),
                    'context': err.get('context', {})},
            })
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


class _Float:
    '''JSON carries only finite numbers: {"$f": hex} marks a float that must be exact or non-finite.'''


def unmark(v):
    if isinstance(v, dict):
        if set(v) == {'$f'}:
            return h2f(v['$f'])
        return {k: unmark(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unmark(x) for x in v]
    return v


def op_join_policy(cases):
    '''
    {"dict": <reference dict, floats may be {"$f": hex}>, "node": s, "parents": [...]} ->
    {"valid": true} or {"raised", "message"}: JoinPolicy.from_dict (JOIN-1), then, as the
    messenger does, make_assembler (the time-mode checks of JOIN-10).
    '''
    out = []
    for c in cases:
        try:
            policy = policies.JoinPolicy.from_dict(unmark(c['dict']))
            grouping.make_assembler(c['node'], c['parents'], policy)
            out.append({'valid': True})
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


def observation(o, make):
    if o is None:
        return None
    if 'unknown' in o:
        return outcomes.Unknown(o['unknown'], 0.0)
    return outcomes.Known(make(o['known']), 0.0)


def sub_obs(k):
    return bmessaging.SubscriptionObservation(
        available = k['available'], leased = k['leased'], unresolved = k['unresolved'],
        dropped = k['dropped'], rejected_publications = k['rejected_publications'], observed_at = 0.0)


def op_observe_demand(cases):
    out = []
    for c in cases:
        try:
            obs = {name: observation(o, sub_obs) for name, o in c['observations']}
            d = scaling.observe_demand(obs, c['required'], c['target'], c['min'], c['max'])
            out.append({'replicas': d.replicas, 'diagnosis': d.diagnosis,
                        'parents': [[p.parent, p.lag, p.replicas, p.unknown_reason] for p in d.parents],
                        'unknown_parents': list(d.unknown_parents),
                        'starved_parents': list(d.starved_parents)})
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


def sample_json(s):
    if s is None:
        return None
    return {'offered': s.offered, 'processed': s.processed, 'dropped': s.dropped,
            'window_seconds': f2h(s.window_seconds)}


def op_throughput_sample(cases):
    # [[offered, processed, dropped, evicted] before, same after, window hex]
    out = []
    for before, after, window in cases:
        s = scaling.throughput_sample(before[0], after[0], before[1], after[1], before[2], after[2],
                                      before[3], after[3], h2f(window))
        out.append(sample_json(s))
    return out


def op_observe_rate_demand(cases):
    out = []
    for c in cases:
        try:
            sample = observation(c['sample'], lambda k: scaling.ThroughputSample(
                k['offered'], k['processed'], k['dropped'], h2f(k['window_seconds'])))
            o = c['objective']
            objective = scaling.RateObjective(h2f(o['min_delivered_fraction']),
                                              h2f(o['control_window_seconds']),
                                              h2f(o['stabilization_seconds']))
            d = scaling.observe_rate_demand(sample, objective, c['current'], c['min'], c['max'],
                                            opt_h2f(c['last_change_at']), h2f(c['now']))
            out.append({'replicas': d.replicas, 'diagnosis': d.diagnosis,
                        'delivered_fraction': opt_f2h(d.delivered_fraction),
                        'sample': sample_json(d.sample), 'unknown_reason': d.unknown_reason})
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


def claim(k):
    grant = tuple(f'dev{i}' for i in range(k['grant_devices'])) if k['grant_devices'] else None
    return allocation.ClaimObservation(claim_id = 'c', owner = 'o', desired_generation = '1',
                                       observed_generation = '1', status = k['status'], grant = grant)


def op_reconcile_capacity(cases):
    out = []
    for c in cases:
        try:
            claims = {cid: observation(o, claim) for cid, o in c['claims']}
            d = scaling.reconcile_capacity(c['desired'], claims)
            out.append({'desired': d.desired, 'granted': d.granted, 'ready': d.ready,
                        'admitted': d.admitted, 'diagnosis': d.diagnosis, 'reason': d.reason,
                        'unknown_claims': list(d.unknown_claims)})
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


def op_admit_autoscaling(cases):
    '''
    {"node", "flow_type", "kind", "parents": n, "nb_tasks", "partition_by": s|null, "is_job",
     "uses_gpu", "gpu_autoscaling"} -> {"reasons": [...]} or the refusal raised. The facts are
    mapped onto the reference's flags exactly as its renderer derives them.
    '''
    out = []
    for c in cases:
        try:
            declares = bool(c['partition_by'])
            reasons = scaling.admit_autoscaling(
                c['node'], c['flow_type'], c['kind'], is_partitioned = declares and c['nb_tasks'] > 1,
                is_job = c['is_job'], has_parents = c['parents'] > 0,
                device_type = 'gpu' if c['uses_gpu'] else 'cpu', gpu_autoscaling = c['gpu_autoscaling'],
                is_join = c['parents'] > 1, declares_partition = declares)
            out.append({'reasons': reasons})
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out


def op_quantile_bounds(cases):
    '''
    [[count, ...] cumulative, q hex, [bound hex, ...]] -> [lower hex, upper hex], null (no
    observations) or the refusal raised, from ``runtime.health.quantile_bounds``.
    '''
    out = []
    for cumulative, q, bounds in cases:
        try:
            r = health.quantile_bounds(cumulative, h2f(q), tuple(h2f(b) for b in bounds))
            out.append(None if r is None else [f2h(r[0]), f2h(r[1])])
        except Exception as e:  # noqa: BLE001
            out.append(raised(e))
    return out

def op_printable(_args):
    '''
    Python 3's str.isprintable over every code point, as ranges of non-printable ones, each with
    whether it is unassigned (Cn): what repr escapes.
    '''
    import unicodedata
    ranges = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        if ch.isprintable():
            continue
        cn = unicodedata.category(ch) == 'Cn'
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == cn:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, cn])
    return {'unidata_version': unicodedata.unidata_version, 'ranges': ranges}


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith('op_')}


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            resp = {'ok': OPS[req['op']](req.get('args'))}
        except Exception:  # noqa: BLE001 — a helper bug: report it, keep serving
            resp = {'err': traceback.format_exc()}
        sys.stdout.write(json.dumps(resp, allow_nan = False) + '\n')
        sys.stdout.flush()


if __name__ == '__main__':
    main()
