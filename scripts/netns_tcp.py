#!/usr/bin/env python3
"""Raw TCP throughput of one stream between two namespace hosts
(scripts/mhost_bench.sh): the path's capacity under the machine's
current load, the baseline for the all-reduce bus bandwidths.
  netns_tcp.py recv PORT          prints the received Gbit/s when the sender closes
  netns_tcp.py send ADDR PORT SECONDS"""
import socket
import sys
import time

def recv(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
    buf = bytearray(1 << 20)
    n, t0 = 0, None
    while True:
        k = c.recv_into(buf)
        if not k:
            break
        if t0 is None:
            t0 = time.monotonic()
        n += k
    dt = time.monotonic() - t0 if t0 else 0
    print(f"{n * 8 / dt / 1e9:.4f}" if dt > 0 else "0", flush=True)

def send(addr, port, secs):
    for _ in range(100):
        try:
            c = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.05)
    buf = bytes(1 << 20)
    end = time.monotonic() + secs
    while time.monotonic() < end:
        c.sendall(buf)
    c.close()

if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(int(sys.argv[2]))
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
