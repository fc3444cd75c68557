#!/usr/bin/env python3
"""kvd: a small key-value server with a binary protocol of its own, standing in for the user's
server that msgbench has never seen (examples/own-protocol.toml measures it, unmodified).

Every frame, both ways:

    offset 0  2 bytes  magic "KV"
    offset 2  1 byte   request: op (1 GET, 2 PUT); reply: status (0 OK, 1 NOT FOUND, 2 BAD)
    offset 3  1 byte   flags (0)
    offset 4  4 bytes  length of what follows, big-endian
    offset 8  4 bytes  request id, big-endian (the reply echoes it)
    offset 12 ...      request: key (4 bytes, big-endian), then the value (PUT);
                       reply: the value (GET)

Each connection's requests are served in order; --service adds a fixed service time, --stall-every
and --stall-for hold every reply due in a stall until its end (to see coordinated omission).

    python3 examples/own-protocol/kvd.py --port 9102 [--service 0.0002] [--stall-every 2 --stall-for 0.5]
"""
import argparse
import asyncio
import struct
import time

HEAD = struct.Struct(">2sBBII")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9102)
    parser.add_argument("--service", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--stall-every", type=float, default=0.0)
    parser.add_argument("--stall-for", type=float, default=0.0)
    args = parser.parse_args()
    store = {}
    started = time.monotonic()

    def delay():
        wait = args.service
        if args.stall_every > 0:
            phase = (time.monotonic() - started) % args.stall_every
            if phase < args.stall_for:
                wait += args.stall_for - phase
        return wait

    def answer(op, body):
        if len(body) < 8 or op not in (1, 2):
            return 2, b""
        key = body[4:8]
        if op == 2:
            store[key] = body[8:]
            return 0, b""
        value = store.get(key)
        return (0, value) if value is not None else (1, b"")

    async def handle(reader, writer):
        try:
            while True:
                magic, op, _flags, length, request_id = HEAD.unpack(await reader.readexactly(HEAD.size))
                if magic != b"KV" or length < 4 or length > 1 << 20:
                    return
                body = request_id.to_bytes(4, "big") + await reader.readexactly(length - 4)
                status, value = answer(op, body)
                wait = delay()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(HEAD.pack(b"KV", status, 0, 4 + len(value), request_id) + value)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve():
        server = await asyncio.start_server(handle, args.host, args.port)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
