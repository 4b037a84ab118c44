#!/usr/bin/env python3
"""A fake vLLM engine over real libzmq (python3-zmq, python3-msgpack).

Speaks the KV-event wire format of vllm/distributed/kv_events.py: a PUB
socket sending [topic, seq (8 bytes big-endian), msgpack batch] and a ROUTER
replay socket answering [delimiter, start seq] with one reply per kept batch
and an end marker (seq = -1, empty payload).

Two modes, like vLLM's publisher:
  publisher.py                         binds its PUB socket (vLLM with a "*" host)
  publisher.py --connect EP --topic T  connects its PUB socket to EP, a
                                       subscriber's listen socket (vLLM with
                                       a remote host; llm-d's topology), and
                                       sends topic T (e.g. kv@<pod>@<model>)
The replay ROUTER binds in both modes.

Driven by JSON lines on stdin, one command each, answered by "ok" (or
"error ...") on stdout. At start it prints "ready <pub_endpoint>
<replay_endpoint>" (in connect mode <pub_endpoint> is EP). Commands:
  {"op": "publish", "events": [...], "rank": r|null, "form": "array"|"map"}
  {"op": "skip", ...same...}          numbered and kept for replay, not sent live
  {"op": "restart"}                   seq back to 0, replay buffer emptied
  {"op": "style", "frames": 2|3}      replay reply layout
  {"op": "wait_subscriber"}           sleeps until a SUB has joined
Events: {"type": "BlockStored", "block_hashes": [...], "parent_block_hash":
h|null, "token_ids": [...], "block_size": n, "lora_id": n|null, "medium":
"GPU", "lora_name": s|null} / {"type": "BlockRemoved", "block_hashes": [...],
"medium": "GPU"} / {"type": "AllBlocksCleared"}.
"""
import argparse
import json
import os
import select
import sys
import time

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
STORED = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"]
REMOVED = ["block_hashes", "medium"]


def encode_event(ev, form):
    if form == "map":
        return dict(ev)
    fields = {"BlockStored": STORED, "BlockRemoved": REMOVED}.get(ev["type"], [])
    return [ev["type"]] + [ev.get(f) for f in fields]


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--connect", help="connect the PUB socket to this endpoint instead of binding")
    args.add_argument("--topic", default="", help="topic frame of every message")
    opts = args.parse_args()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)  # XPUB: sees subscriptions (wait_subscriber)
    if opts.connect:
        # libzmq connects in the background and reconnects on its own.
        pub.connect(opts.connect)
        pub_endpoint = opts.connect
    else:
        pub_endpoint = "tcp://127.0.0.1:%d" % pub.bind_to_random_port("tcp://127.0.0.1")
    router = ctx.socket(zmq.ROUTER)
    router_port = router.bind_to_random_port("tcp://127.0.0.1")
    topic = opts.topic.encode()
    seq, buf, frames = 0, [], 3
    subscribed = False
    print("ready %s tcp://127.0.0.1:%d" % (pub_endpoint, router_port), flush=True)
    poller = zmq.Poller()
    # stdin is read from its file descriptor with our own line buffer:
    # sys.stdin's buffered reader can hold a line poll() no longer reports
    # as readable, which once left a command unanswered until EOF.
    stdin_fd = sys.stdin.fileno()
    pending = b""
    poller.register(stdin_fd, zmq.POLLIN)
    poller.register(router, zmq.POLLIN)
    poller.register(pub, zmq.POLLIN)
    while True:
        ready = poller.poll(200)
        if not ready and select.select([stdin_fd], [], [], 0)[0]:
            # A readable stdin that zmq_poll did not report (seen once
            # under load in CI: a command went unanswered for 30 s); the
            # timeout makes such a miss cost at most 200 ms.
            ready = [(stdin_fd, zmq.POLLIN)]
        for sock, _ in ready:
            # Non-blocking receives: XPUB can report POLLIN for a
            # subscription it then filters (a duplicate, sent when a
            # subscriber reconnects under load), and a blocking recv()
            # there once left every later command unanswered.
            if sock is pub:
                try:
                    msg = pub.recv(zmq.NOBLOCK)
                except zmq.Again:
                    continue
                if msg[:1] == b"\x01":
                    subscribed = True
            elif sock is router:
                try:
                    ident, _, start = router.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    continue
                start = int.from_bytes(start, "big")
                for s, payload in buf:
                    if s >= start:
                        sb = s.to_bytes(8, "big")
                        router.send_multipart([ident, sb, payload] if frames == 2 else [ident, topic, sb, payload])
                router.send_multipart([ident, END_SEQ, b""] if frames == 2 else [ident, topic, END_SEQ, b""])
            else:
                chunk = os.read(stdin_fd, 1 << 16)
                if not chunk:
                    return
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()  # an incomplete last line waits
                for line in lines:
                    if not line.strip():
                        continue
                    cmd = json.loads(line)
                    op = cmd["op"]
                    if op in ("publish", "skip"):
                        form = cmd.get("form", "array")
                        events = [encode_event(e, form) for e in cmd["events"]]
                        rank = cmd.get("rank")
                        if form == "map":
                            batch = {"ts": time.time(), "events": events}
                            if rank is not None:
                                batch["data_parallel_rank"] = rank
                        else:
                            batch = [time.time(), events] + ([rank] if rank is not None else [])
                        payload = msgpack.packb(batch, use_bin_type=True)
                        buf.append((seq, payload))
                        buf = buf[-10000:]
                        if op == "publish":
                            pub.send_multipart([topic, seq.to_bytes(8, "big"), payload])
                        seq += 1
                    elif op == "restart":
                        seq, buf = 0, []
                    elif op == "style":
                        frames = cmd["frames"]
                    elif op == "wait_subscriber":
                        deadline = time.time() + 10
                        while not subscribed and time.time() < deadline:
                            if pub.poll(100):
                                try:
                                    if pub.recv(zmq.NOBLOCK)[:1] == b"\x01":
                                        subscribed = True
                                except zmq.Again:
                                    pass
                        if not subscribed:
                            print("error no subscriber", flush=True)
                            continue
                    print("ok", flush=True)


if __name__ == "__main__":
    main()
