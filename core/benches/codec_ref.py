#!/usr/bin/env python3
"""The Python reference's (videoflow 1.0.4) envelope codec on THIS machine, on the same four
cases as core/benches/codec.rs.

Why: the reference's published v4 figures were measured on another machine; timing both codecs
on the same (shared, noisy) box gives a ratio that does not depend on the hardware.

    source scripts/env.sh && "$VF_REF_PYTHON" core/benches/codec_ref.py [--quick]

Prints one JSON object: {"<case>/<op>": {"median_us": …, "min_us": …, "runs": …}, …, "protobuf": impl}.
Each figure is the median over repeated timeit runs (each run: as many calls as fit in ~0.2 s).
"""
import json
import statistics
import sys
import timeit

import numpy as np
from google.protobuf.internal import api_implementation
from videoflow.wire import serialization as ser

QUICK = "--quick" in sys.argv
REPEATS = 5 if QUICK else 15


def scalar_map():
    return {"count": 17, "mean": 3.25, "label": "car", "ok": True}


def detections(n):
    return [
        {"box": [float(i), i + 1.5, i + 40.0, i + 80.0], "score": 0.5 + i / 100.0,
         "class_id": i % 7, "label": f"class-{i % 7}"}
        for i in range(n)
    ]


def frame(w, h):
    return (np.arange(w * h * 3, dtype=np.int64) % 251).astype(np.uint8).reshape(h, w, 3)


CASES = {
    "scalar_map": scalar_map(),
    "detections_20": detections(20),
    "tensor_640x480x3": frame(640, 480),
    "tensor_1920x1080x3": frame(1920, 1080),
}


def encode(payload):
    return ser.encode_envelope(
        producer_name="producer", flow_id="bench", run_id="r1",
        trace_id="0123456789abcdef0123456789abcdef", seq=42, msg_type="data",
        metadata={"proctime": 0.001, "actual_proctime": 0.002}, payload=payload,
        span_id="", parent_span_id="", replica_id=0, event_ts=1_700_000_000.25, error=None,
        inline_threshold=1 << 30)  # "inline": tensors above the 512 KiB default stay inline


def per_call_us(fn):
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()  # calls that take at least 0.2 s
    runs = timer.repeat(repeat=REPEATS, number=number)
    return [r / number * 1e6 for r in runs]


def main():
    out = {"protobuf": api_implementation.Type()}
    for name, payload in CASES.items():
        buf = encode(payload)
        ser.decode_envelope(buf)  # warm: imports, registries
        for op, fn in (("encode", lambda: encode(payload)), ("decode", lambda: ser.decode_envelope(buf))):
            runs = per_call_us(fn)
            out[f"{name}/{op}"] = {"median_us": statistics.median(runs), "min_us": min(runs), "runs": len(runs)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
