"""Unit tests of the Python SDK: values, tensors, framing and the serve loop (no worker)."""

import json
import socket
import threading
import unittest

import videoflow_sdk as vf
from videoflow_sdk import _protocol as p

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None


class Values(unittest.TestCase):
    def test_scalars_lists_and_maps_round_trip(self):
        for obj in [None, True, 0, -5, 2.5, "x", b"\x00\x01", [1, [2.0, "a"]], {"k": [None]}]:
            self.assertEqual(vf.from_value(vf.to_value(obj)), obj)

    def test_bool_is_not_int_and_int64_is_enforced(self):
        self.assertEqual(vf.to_value(True).WhichOneof("kind"), "bool_value")
        with self.assertRaises(OverflowError):
            vf.to_value(1 << 63)

    def test_unknown_payload_types_stay_raw(self):
        raw = vf.RawPayload("my.Type", b"\x01\x02")
        self.assertEqual(vf.encode_payload(raw), ("my.Type", b"\x01\x02"))
        self.assertEqual(vf.decode_payload("my.Type", b"\x01\x02"), raw)

    def test_messages_travel_under_their_full_name(self):
        frame = vf.Frame(pixel_format="rgb8")
        t, data = vf.encode_payload(frame)
        self.assertEqual(t, "videoflow.v1.Frame")
        self.assertEqual(vf.decode_payload(t, data), frame)


@unittest.skipIf(np is None, "numpy not installed")
class Tensors(unittest.TestCase):
    def test_numpy_round_trip_keeps_dtype_shape_and_bytes(self):
        a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
        t, data = vf.encode_payload(a)
        self.assertEqual(t, "videoflow.v1.Tensor")
        msg = p.Tensor.FromString(data)
        self.assertEqual((list(msg.shape), msg.dtype), ([2, 3, 4], "uint8"))
        self.assertEqual(msg.data, a.tobytes())
        back = vf.decode_payload(t, data)
        self.assertTrue(np.array_equal(back, a))

    def test_big_endian_arrays_travel_little_endian(self):
        a = np.array([1.5, -2.0], dtype=">f4")
        msg = vf.numpy_to_tensor(a)
        self.assertEqual(msg.dtype, "float32")
        self.assertTrue(np.array_equal(vf.tensor_to_numpy(msg), a))

    def test_tensors_nest_in_values(self):
        v = vf.from_value(vf.to_value({"t": np.ones((2,), dtype=np.int64)}))
        self.assertTrue(np.array_equal(v["t"], [1, 1]))


def request(rid, **body):
    m = p.WorkerMessage(request_id=rid)
    for k, v in body.items():
        getattr(m, k).CopyFrom(v)
    return m


class Serve(unittest.TestCase):
    """Drives `serve` over a socketpair as the worker would."""

    def converse(self, cls, requests):
        worker, comp = socket.socketpair()
        t = threading.Thread(target=vf.serve, args=(cls, comp, "t"))
        t.start()
        hello = p.read_frame(worker, p.ComponentMessage)
        self.assertEqual(list(hello.hello.protocol_versions), [1])
        self.assertTrue(hello.hello.sdk.startswith("videoflow-sdk-python/"))
        results = []
        for r in requests:
            p.write_frame(worker, r)
            results.append(p.read_frame(worker, p.ComponentMessage).result)
        t.join(5)
        worker.close()
        comp.close()
        return results

    def open_request(self, params):
        o = p.WorkerMessage().open
        o.protocol_version = 1
        o.params_json = json.dumps(params)
        o.node.node_name = "n"
        return o

    def process_request(self, value, seq=7):
        m = p.WorkerMessage()
        inp = m.process.inputs.add()
        inp.parent = "a"
        t, data = vf.encode_payload(value)
        inp.present.payload_type = t
        inp.present.data = data
        inp.info.trace_id = "tr"
        inp.info.seq = seq
        m.process.input_key = "key"
        return m.process

    def test_a_processor_conversation(self):
        class Add(vf.Processor):
            def __init__(self, operand):
                self.operand = operand

            def process(self, x):
                if x < 0:
                    raise vf.Poison("negative", remedy="send positives")
                if x == 13:
                    raise ValueError("unlucky")
                self.ctx.set_output_partition_key(self.ctx.first().seq)
                return x + self.operand

        results = self.converse(
            Add,
            [
                request(1, open=self.open_request({"operand": 10})),
                request(2, process=self.process_request(5)),
                request(3, process=self.process_request(-1)),
                request(4, process=self.process_request(13)),
                request(5, close=p.WorkerMessage().close),
            ],
        )
        self.assertEqual([r.request_id for r in results], [1, 2, 3, 4, 5])
        self.assertFalse(results[0].HasField("error"))
        out = results[1].output
        self.assertEqual(vf.decode_payload(out.payload.payload_type, out.payload.data), 15)
        self.assertEqual(vf.from_value(out.partition_key), 7)
        self.assertEqual(
            (results[2].error.code, results[2].error.disposition, results[2].error.remedy),
            ("VF_POISON", "poison", "send positives"),
        )
        self.assertFalse(results[2].HasField("output"))
        self.assertEqual(results[3].error.code, "")
        self.assertEqual(results[3].error.message, "ValueError: unlucky")

    def test_a_producer_ends_with_end_of_input(self):
        @vf.producer
        def numbers(n=2):
            for i in range(n):
                yield i

        results = self.converse(
            numbers,
            [
                request(1, open=self.open_request({"n": 1})),
                request(2, next=p.WorkerMessage().next),
                request(3, next=p.WorkerMessage().next),
                request(4, close=p.WorkerMessage().close),
            ],
        )
        out = results[1].output.payload
        self.assertEqual(vf.decode_payload(out.payload_type, out.data), 0)
        self.assertTrue(results[2].end_of_input)

    def test_consumers_ignore_runtime_flags_they_do_not_take(self):
        seen = []

        @vf.consumer
        def sink(x):
            seen.append(x)

        class Strict(vf.Consumer):
            def __init__(self):
                pass

            def consume(self, x):
                seen.append(("strict", x))

        for cls in (sink, Strict):
            m = p.WorkerMessage()
            m.consume.CopyFrom(p.WorkerMessage().consume)
            inp = m.consume.inputs.add()
            inp.parent = "a"
            inp.missing = True
            results = self.converse(
                cls,
                [
                    request(1, open=self.open_request({"idempotent": True})),
                    request(2, consume=m.consume),
                    request(3, close=p.WorkerMessage().close),
                ],
            )
            self.assertFalse(results[0].HasField("error"), results[0].error.message)
        self.assertEqual(seen, [None, ("strict", None)])

    def test_pipelined_requests_are_answered_in_order_and_batched(self):
        """A worker that writes every request before reading any (max_in_flight > 1) gets
        every answer, in request order, and the Hello announces more than one in flight."""

        class Twice(vf.Processor):
            def process(self, x):
                return 2 * x

        worker, comp = socket.socketpair()
        t = threading.Thread(target=vf.serve, args=(Twice, comp, "t"))
        t.start()
        hello = p.read_frame(worker, p.ComponentMessage)
        self.assertGreater(hello.hello.max_in_flight, 1)
        n = 50
        frames = [p.frame_bytes(request(1, open=self.open_request({})))]
        frames += [
            p.frame_bytes(request(2 + i, process=self.process_request(i, seq=i)))
            for i in range(n)
        ]
        frames.append(p.frame_bytes(request(2 + n, close=p.WorkerMessage().close)))
        worker.sendall(b"".join(frames))  # one write: the component reads them batched
        results = [p.read_frame(worker, p.ComponentMessage).result for _ in range(n + 2)]
        t.join(5)
        worker.close()
        comp.close()
        self.assertEqual([r.request_id for r in results], list(range(1, n + 3)))
        outs = [
            vf.decode_payload(r.output.payload.payload_type, r.output.payload.data)
            for r in results[1:-1]
        ]
        self.assertEqual(outs, [2 * i for i in range(n)])

    def test_max_in_flight_can_be_lowered_to_one(self):
        worker, comp = socket.socketpair()
        t = threading.Thread(
            target=vf.serve, args=(vf.Processor, comp, "t"), kwargs={"max_in_flight": 1}
        )
        t.start()
        hello = p.read_frame(worker, p.ComponentMessage)
        self.assertEqual(hello.hello.max_in_flight, 1)
        worker.close()
        t.join(5)
        comp.close()

    def test_a_frame_cut_by_the_worker_ends_the_component(self):
        worker, comp = socket.socketpair()
        box = {}

        def run():
            try:
                vf.serve(vf.Processor, comp, "t")
            except EOFError as e:
                box["error"] = e

        t = threading.Thread(target=run)
        t.start()
        p.read_frame(worker, p.ComponentMessage)
        worker.sendall(p.frame_bytes(request(1, open=self.open_request({})))[:-1])
        worker.close()
        t.join(5)
        comp.close()
        self.assertIn("error", box)


if __name__ == "__main__":
    unittest.main()
