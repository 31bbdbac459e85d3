'''
Runs videoflow 1.0.4's own VideoFileReader over one file for the differential video tests
(worker/tests/differential_video.rs): every output encoded by 1.0.4's wire encoder, with the
event time the reader stamped, so the Rust side compares bytes on the wire, not a re-encoding.

    python video_reference.py <video_file> <params-json> <out-dir>

Writes <out-dir>/<n>.bin (the payload of output n, 1.0.4's `_encode_payload_v4`) and prints
one JSON line: {"outputs": [{"payload_type", "event_ts" (the float's 64 bits in hex, or
null)}], "end": text}.
Needs OpenCV in the reference virtualenv (opencv-python-headless, scripts/
reference-requirements.txt): 1.0.4 reads video with it.
'''
import json
import os
import struct
import sys

from videoflow.producers.video import VideoFileReader
from videoflow.wire.serialization import _encode_payload_v4


def f2h(x: float) -> str:
    return f"{struct.unpack('>Q', struct.pack('>d', x))[0]:016x}"


class Ctx:
    '''The part of RuntimeContext a producer's next() uses.'''

    def __init__(self):
        self.event_ts = None

    def set_event_timestamp(self, ts):
        self.event_ts = ts


def main() -> None:
    video_file, params, out_dir = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    node = VideoFileReader(video_file, **params)
    node.open()
    outputs, end = [], 'StopIteration'
    try:
        while True:
            ctx = Ctx()
            try:
                item = node.next(ctx)
            except StopIteration:
                break
            payload_type, data = _encode_payload_v4(item)
            with open(os.path.join(out_dir, f'{len(outputs)}.bin'), 'wb') as f:
                f.write(data)
            ts = None if ctx.event_ts is None else f2h(float(ctx.event_ts))
            outputs.append({'payload_type': payload_type, 'event_ts': ts})
    except Exception as e:  # what ended it, for the report
        end = f'{type(e).__name__}: {e}'
    finally:
        node.close()
    print(json.dumps({'outputs': outputs, 'end': end}))


if __name__ == '__main__':
    main()
