'''
Runs one of videoflow 1.0.4's image nodes over inputs made by the differential vision tests
(worker/tests/differential_vision.rs), so the Rust side compares its own outputs with 1.0.4's
on the wire and pixel for pixel.

    python vision_reference.py <job.json> <out-dir>

job.json: {"class": "<module>.<Name>", "params": {...}, "producer": bool,
           "cases": [[<input>, ...], ...]}
where an <input> is {"raw": "<file>", "dtype": "uint8", "shape": [...]} (an ndarray read
from <file>), {"json": <value>} (lists become tuples), or {"none": true}.
A processor runs process(*inputs) once per case; a producer runs next() until
StopIteration. For output n it writes <out-dir>/<n>.bin (1.0.4's `_encode_payload_v4`) and,
for an ndarray, <out-dir>/<n>.raw (its C-order bytes), and prints one JSON line:
{"outputs": [{"payload_type", "shape"} or {"error": "<Type>: <text>"}]}.
'''
import importlib
import json
import os
import sys

import numpy as np

from videoflow.wire.serialization import _encode_payload_v4


def tuples(v):
    return tuple(tuples(x) for x in v) if isinstance(v, list) else v


def load(spec, base):
    if spec.get('none'):
        return None
    if 'json' in spec:
        return tuples(spec['json'])
    data = np.fromfile(os.path.join(base, spec['raw']), dtype=spec['dtype'])
    return data.reshape(spec['shape'])


def main() -> None:
    job_path, out_dir = sys.argv[1], sys.argv[2]
    with open(job_path) as f:
        job = json.load(f)
    base = os.path.dirname(job_path)
    module, name = job['class'].rsplit('.', 1)
    node = getattr(importlib.import_module(module), name)(**job['params'])
    outputs = []

    def emit(item):
        n = len(outputs)
        payload_type, data = _encode_payload_v4(item)
        with open(os.path.join(out_dir, f'{n}.bin'), 'wb') as f:
            f.write(data)
        entry = {'payload_type': payload_type}
        if isinstance(item, np.ndarray):
            np.ascontiguousarray(item).tofile(os.path.join(out_dir, f'{n}.raw'))
            entry['shape'] = list(item.shape)
        outputs.append(entry)

    if job.get('producer'):
        node.open()
        while True:
            try:
                item = node.next()
            except StopIteration:
                break
            emit(item)
        node.close()
    else:
        for case in job['cases']:
            try:
                item = node.process(*[load(s, base) for s in case])
            except Exception as e:  # the reference's failure, compared by kind
                outputs.append({'error': f'{type(e).__name__}: {e}'})
                continue
            emit(item)
    print(json.dumps({'outputs': outputs}))


if __name__ == '__main__':
    main()
