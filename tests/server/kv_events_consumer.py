#!/usr/bin/env python3
"""An independent consumer of vLLM's KV events (ZeroMQ + msgpack) against `strata serve`.

It knows nothing of Strata's code: it decodes the wire format of vLLM's KVEventBatch
(array_like msgspec structs, as vLLM's examples/online_serving/kv_events_subscriber.py reads them)
with python3-msgpack, drives the server over HTTP, and checks what a router relies on.

  full:  completions sharing a prefix, then enough distinct ones to overflow a small pool; checks
         the framing (topic, contiguous sequence numbers), the schema, BlockStored's block size,
         token ids (the prompts' own, from /tokenize) and parent chain, the shared prefix stored
         once, BlockRemoved for evicted blocks only, and that a subscriber started late gets the
         same batches from the replay endpoint from sequence 0.
  quick: one completion; one BlockStored arrives under the topic.
  reset: POST /reset_prefix_cache answers 200 with no body and AllBlocksCleared arrives, alone
         in its batch; the prompt asked again is computed anew (no cached tokens) and its blocks
         are stored again under the same hashes.
  tiers: a server with a host tier over a disk tier and a small pool: what the pool evicts is
         BlockRemoved "GPU" then BlockStored "CPU" (vLLM's offloading form: no parent, no token
         ids), what the host tier lets go is BlockRemoved "CPU" and BlockStored "Disk", each medium
         only removes what it stored, the counts match the server's own metrics, and a prompt
         asked again comes back into the pool ("GPU") from the tiers.

Usage: kv_events_consumer.py full|quick|reset|tiers HTTP_BASE PUB_ENDPOINT REPLAY_ENDPOINT TOPIC BLOCK_SIZE
Exit 0 when every check holds; the failures are printed otherwise.
"""

import json
import sys
import threading
import time
import urllib.request

import msgpack
import zmq

WAIT_S = 20.0  # bound on every wait for events


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"/metrics has no {name}")


class Subscriber:
    """A SUB socket read on a thread of its own: (topic, seq, payload) in arrival order."""

    def __init__(self, ctx, endpoint, topic):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.sock.connect(endpoint)
        self.messages = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            if self.sock.poll(50):
                frames = self.sock.recv_multipart()
                with self.lock:
                    self.messages.append(frames)

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close(linger=0)


def replay(ctx, endpoint, start_seq):
    """[(seq, payload)] from start_seq on, as a DEALER asks the replay endpoint."""
    sock = ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    sock.send_multipart([b"", start_seq.to_bytes(8, "big", signed=True)])
    got = []
    while True:
        if not sock.poll(int(WAIT_S * 1000)):
            raise AssertionError("the replay endpoint did not answer")
        empty, seq_bytes, payload = sock.recv_multipart()
        assert empty == b"", "a replay reply starts with an empty delimiter frame"
        seq = int.from_bytes(seq_bytes, "big", signed=True)
        if seq == -1:
            assert payload == b"", "the end marker's payload is empty"
            break
        got.append((seq, payload))
    sock.close(linger=0)
    return got


TIER_MEDIA = ("CPU", "Disk", "Remote")  # vLLM's offloading media, and Strata's shared pool


def decode(payload, block_size, media=("GPU",)):
    """vLLM's KVEventBatch: [ts, [events]] (no data_parallel_rank when unset). Every event's
    medium must be one of media: "GPU" the pool's blocks, with their tokens and parent chain;
    a tier's blocks come as vLLM's offloading connector sends them, without either."""
    batch = msgpack.unpackb(payload, raw=False)
    assert isinstance(batch, list) and len(batch) == 2, f"batch shape: {batch!r:.200}"
    ts, events = batch
    assert isinstance(ts, float) and abs(ts - time.time()) < 3600, f"ts {ts!r}"
    for e in events:
        tag = e[0]
        if tag == "BlockStored":
            assert len(e) == 7, f"BlockStored has 6 fields: {e!r:.200}"
            _, hashes, parent, tokens, size, lora_id, medium = e
            assert hashes and all(isinstance(h, int) and 0 <= h < 2**64 for h in hashes)
            assert parent is None or isinstance(parent, int)
            assert size == block_size, f"block_size {size}, expected {block_size}"
            assert lora_id is None and medium in media, f"lora_id {lora_id}, medium {medium}"
            if medium == "GPU":
                assert len(tokens) == len(hashes) * block_size, "token_ids = blocks x block_size"
            else:
                assert parent is None and tokens == [], f"a tier's BlockStored: {e!r:.200}"
        elif tag == "BlockRemoved":
            assert len(e) == 3 and e[1] and e[2] in media, f"BlockRemoved: {e!r:.200}"
        else:
            assert e == ["AllBlocksCleared"], f"unknown event {e!r:.200}"
    return events


def blocks_stored(events, block_size):
    """Each stored block as (hash, parent, tokens), chains unrolled, in order."""
    out = []
    for e in events:
        if e[0] != "BlockStored" or e[6] != "GPU":
            continue
        parent = e[2]
        for i, h in enumerate(e[1]):
            out.append((h, parent, tuple(e[3][i * block_size:(i + 1) * block_size])))
            parent = h
    return out


def collect(sub, base, ctx, replay_endpoint, topic, min_batches=0):
    """Every batch published so far, in sequence order: the SUB's, with what it missed (before its
    subscription took effect) filled in from the replay endpoint, as vLLM's example does. With
    min_batches, also waits for that many (an event the server queued but has not counted yet:
    the reset's AllBlocksCleared, after its answer)."""
    deadline = time.time() + WAIT_S
    while True:  # until the blocks heard add up to what the server says it published
        published = metric(base, "strata:kv_events_published_total")
        with sub.lock:
            msgs = list(sub.messages)
        for frames in msgs:
            assert len(frames) == 3, "[topic, seq, payload]"
            assert frames[0] == topic.encode(), f"topic {frames[0]!r}"
            assert len(frames[1]) == 8, "seq is 8 bytes"
        by_seq = {int.from_bytes(f[1], "big", signed=True): f[2] for f in msgs}
        for seq, payload in replay(ctx, replay_endpoint, 0):
            if seq not in by_seq:  # sent before the subscription took effect
                by_seq[seq] = payload
        blocks = 0
        for payload in by_seq.values():
            for e in msgpack.unpackb(payload, raw=False)[1]:
                blocks += len(e[1]) if e[0] != "AllBlocksCleared" else 1
        if by_seq and blocks == published and len(by_seq) >= min_batches:
            break
        if time.time() > deadline:
            raise AssertionError(f"heard {blocks} blocks' events, the server published {published}")
        time.sleep(0.05)
    seqs = sorted(by_seq)
    assert seqs == list(range(len(seqs))), f"sequence numbers 0, 1, 2, ...: {seqs[:20]}"
    return [(s, by_seq[s]) for s in seqs], len(msgs)


def complete(base, prompt):
    post(base, "/v1/completions",
         {"model": "strata-tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0})
    return post(base, "/tokenize", {"prompt": prompt})["tokens"]


def full(base, pub, replay_endpoint, topic, bs):
    ctx = zmq.Context()
    sub = Subscriber(ctx, pub, topic)
    prefix = "In the beginning God created the heaven and the earth. " * 6
    prompt_a = prefix + "And the earth was without form, and void."
    prompt_b = prefix + "And God said, Let there be light: and there was light."
    tokens_a = complete(base, prompt_a)
    tokens_b = complete(base, prompt_b)
    shared = 0
    while tokens_a[shared] == tokens_b[shared]:
        shared += 1
    assert shared >= 3 * bs, f"the shared prefix is {shared} tokens: too short for the test"
    batches, _ = collect(sub, base, ctx, replay_endpoint, topic)
    stored = [b for _, p in batches for b in blocks_stored(decode(p, bs), bs)]

    # Each prompt's full blocks were stored, chained, with its own tokens; the shared ones once.
    for name, tokens in (("A", tokens_a), ("B", tokens_b)):
        parent = None
        for j in range(len(tokens) // bs):
            block = tuple(tokens[j * bs:(j + 1) * bs])
            found = [h for h, p, t in stored if p == parent and t == block]
            assert len(found) == 1, f"prompt {name} block {j}: stored {len(found)} times"
            parent = found[0]
    assert len(stored) == len(tokens_a) // bs + len(tokens_b) // bs - shared // bs, \
        f"{len(stored)} blocks stored: the shared prefix's should be stored once"

    # Overflow the pool with prompts that share nothing: the oldest cached blocks are evicted.
    words = "light darkness waters firmament evening morning seed fruit herb tree".split()
    for i in range(8):
        text = f"Prompt {i}: " + " ".join(words[(i * 7 + k * 3) % len(words)] + str(i * 13 + k)
                                          for k in range(40))
        complete(base, text)
    batches, heard_live = collect(sub, base, ctx, replay_endpoint, topic)
    assert heard_live > 0, "the subscriber heard nothing live"
    seen, removed = set(), 0
    for _, payload in batches:
        for e in decode(payload, bs):
            if e[0] == "BlockStored":
                seen.update(e[1])
            elif e[0] == "BlockRemoved":
                for h in e[1]:
                    assert h in seen, f"BlockRemoved of {h:#x}, never stored"
                    seen.discard(h)
                    removed += 1
    assert removed > 0, "a small pool evicted nothing"
    assert metric(base, "strata:kv_events_dropped_total") == 0

    # A subscriber started now catches up from sequence 0 and sees the very same batches.
    late = replay(ctx, replay_endpoint, 0)
    assert late == batches, f"replay: {len(late)} batches, live: {len(batches)}"
    sub.close()
    ctx.term()
    print(f"kv_events_consumer: {len(batches)} batches, {len(stored)} blocks stored for the "
          f"shared prompts, {removed} removed, replay identical")


def quick(base, pub, replay_endpoint, topic, bs):
    ctx = zmq.Context()
    sub = Subscriber(ctx, pub, topic)
    tokens = complete(base, "In the beginning God created the heaven and the earth. " * 3)
    batches, _ = collect(sub, base, ctx, replay_endpoint, topic)
    stored = [b for _, p in batches for b in blocks_stored(decode(p, bs), bs)]
    assert len(stored) == len(tokens) // bs, f"{len(stored)} blocks for {len(tokens)} tokens"
    sub.close()
    ctx.term()
    print(f"kv_events_consumer: quick: {len(stored)} blocks stored")


def reset(base, pub, replay_endpoint, topic, bs):
    ctx = zmq.Context()
    sub = Subscriber(ctx, pub, topic)
    prompt = "And God called the light Day, and the darkness he called Night. " * 3
    earlier, _ = collect(sub, base, ctx, replay_endpoint, topic)
    complete(base, prompt)
    batches, _ = collect(sub, base, ctx, replay_endpoint, topic)
    before = [h for _, p in batches[len(earlier):] for h, _, _ in blocks_stored(decode(p, bs), bs)]
    req = urllib.request.Request(base + "/reset_prefix_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200 and r.read() == b"", "reset: 200 with no body"
    after, _ = collect(sub, base, ctx, replay_endpoint, topic, min_batches=len(batches) + 1)
    assert len(after) == len(batches) + 1, f"{len(after) - len(batches)} batches for the reset"
    assert decode(after[-1][1], bs) == [["AllBlocksCleared"]], f"{decode(after[-1][1], bs)!r:.200}"
    answer = post(base, "/v1/completions", {"model": "strata-tiny", "prompt": prompt,
                                           "max_tokens": 1, "temperature": 0})
    cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == 0, f"{cached} cached tokens after the reset"
    again, _ = collect(sub, base, ctx, replay_endpoint, topic)
    stored = [h for _, p in again[len(after):] for h, _, _ in blocks_stored(decode(p, bs), bs)]
    assert before and set(before) <= set(stored), "the prompt's blocks are not stored again"
    sub.close()
    ctx.term()
    print(f"kv_events_consumer: reset: AllBlocksCleared, then {len(stored)} blocks stored again")


def tiers(base, pub, replay_endpoint, topic, bs):
    ctx = zmq.Context()
    sub = Subscriber(ctx, pub, topic)
    prompt = "In the beginning God created the heaven and the earth. " * 6
    tokens = complete(base, prompt)
    words = "light darkness waters firmament evening morning seed fruit herb tree".split()
    for i in range(10):  # overflow the pool, then the host tier
        complete(base, f"Prompt {i}: " + " ".join(words[(i * 7 + k * 3) % len(words)] +
                                                  str(i * 13 + k) for k in range(40)))
    batches, _ = collect(sub, base, ctx, replay_endpoint, topic)
    media = ("GPU",) + TIER_MEDIA
    held = {m: set() for m in media}  # what each medium holds, as the events tell it
    ever = {m: set() for m in media}
    stored = {m: 0 for m in media}
    offloaded_after_eviction = 0
    for _, payload in batches:
        for e in decode(payload, bs, media):
            if e[0] == "AllBlocksCleared":
                held["GPU"].clear()
                continue
            medium = e[6] if e[0] == "BlockStored" else e[2]
            for h in e[1]:
                if e[0] == "BlockStored":
                    if medium == "CPU":
                        # The host tier takes what the pool evicts (--kv-offload-policy evict),
                        # or what it reads back from disk.
                        assert h not in held["GPU"], f"{h:#x} on the host tier while in the pool"
                        offloaded_after_eviction += 1
                    if medium == "Disk":
                        # The disk tier's events come at the step after its write, by when the
                        # host tier may have let the block go.
                        assert h in ever["CPU"], f"{h:#x} written to disk, never on the host tier"
                    held[medium].add(h)
                    ever[medium].add(h)
                    stored[medium] += 1
                else:
                    assert h in held[medium], f"BlockRemoved {medium} of {h:#x}, never stored there"
                    held[medium].discard(h)
    assert stored["CPU"] > 0 and stored["Disk"] > 0, f"stored by medium: {stored}"
    assert stored["CPU"] == metric(base, "strata:kv_offloaded_blocks_total"), \
        f"{stored['CPU']} host blocks stored, the server offloaded " \
        f"{metric(base, 'strata:kv_offloaded_blocks_total')}"
    # (The disk tier's events follow its writes by up to a step, the metric by up to another:
    # their counts are not compared.)
    first = None  # the prompt's first block, long gone from the pool
    for h, parent, t in blocks_stored([e for _, p in batches for e in decode(p, bs, media)], bs):
        if parent is None and list(t) == tokens[:bs]:
            first = h
    assert first is not None and first not in held["GPU"], "the first prompt is still in the pool"
    assert first in held["CPU"] or first in held["Disk"], "the first prompt left every tier"
    # Asked again, the prompt comes back from the tiers: its blocks are the pool's again.
    complete(base, prompt)
    batches, _ = collect(sub, base, ctx, replay_endpoint, topic)
    back = [h for _, p in batches for e in decode(p, bs, media)
            if e[0] == "BlockStored" and e[6] == "GPU" for h in e[1]]
    assert first in back[-(len(tokens) // bs):], "the prompt's first block is not back in the pool"
    sub.close()
    ctx.term()
    print(f"kv_events_consumer: tiers: stored by medium {stored}, "
          f"{len(held['CPU'])} on the host tier and {len(held['Disk'])} on disk at the end")


def main():
    mode, base, pub, replay_endpoint, topic, bs = sys.argv[1:7]
    try:
        {"full": full, "quick": quick, "reset": reset, "tiers": tiers}[mode](base, pub, replay_endpoint, topic,
                                                             int(bs))
    except AssertionError as e:
        print(f"FAIL: kv_events_consumer {mode}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
