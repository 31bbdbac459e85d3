#!/usr/bin/python3
"""A real RTSP server for the video tests: GStreamer's rtsp-server (Debian's
gir1.2-gst-rtsp-server-1.0, python3-gi, gstreamer1.0-plugins-{base,good,bad}) serving one
H.264 MP4 file at rtsp://127.0.0.1:PORT/test over RTP/UDP and RTP-over-RTSP/TCP.

usage: rtsp_server.py FILE PORT [shared]
PORT 0 picks a free port. Once listening it prints "PORT <n>" on stdout. With `shared`,
every client joins the one playing stream (so a late client starts mid-file); without, each
client gets the file from its start. The file is played once per stream, in real time.
Killed (SIGKILL) or stopped (SIGSTOP) by the test to play a server that goes away or stalls.
"""
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main() -> None:
    path, port = sys.argv[1], sys.argv[2]
    shared = len(sys.argv) > 3 and sys.argv[3] == "shared"
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory = GstRtspServer.RTSPMediaFactory()
    location = path.replace("\\", "\\\\").replace('"', '\\"')
    factory.set_launch(
        f'( filesrc location="{location}" ! qtdemux ! h264parse '
        "! rtph264pay name=pay0 pt=96 config-interval=-1 )"
    )
    factory.set_shared(shared)
    server.get_mount_points().add_factory("/test", factory)
    if server.attach(None) == 0:
        sys.exit(f"cannot listen on 127.0.0.1:{port}")
    print(f"PORT {server.get_bound_port()}", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
