"""TensorFlow 2's sidecar evaluator for muster's ps training of the MLP.

Runs as the `evaluator` task of a ps cluster: its TF_CONFIG names it
{"type": "evaluator", "index": 0} and, per TensorFlow's rules, the cluster
it sees has no evaluator (it stands outside the ClusterSpec, it talks to no
task). It watches the chief's checkpoint directory and evaluates every new
checkpoint on the Fashion-MNIST test set with numpy, printing
  eval step=<global step> test_accuracy=<fraction> images=<n>
until it is stopped (musterd stops it when the chief has finished).

Checkpoint format: api/base/checkpoint_file.h, version 2, kind "ps" (every
number little-endian): "MUSTERCK" | u32 version | u64 body bytes | body |
u32 CRC-32 of the body; the body is u32 kind bytes, kind, u32 counters,
counters x (u32 name bytes, name, i64), u32 tensors, tensors x (u32 name
bytes, name, u64 elements, float32s). The global step is counter "step".
Parameters are column-major (out x in), as runtime/nn/affine.h reads them.
"""
import argparse
import glob
import gzip
import json
import os
import struct
import sys
import time
import zlib

import numpy as np


def read_checkpoint(path):
    """(global step, {name: float32 array}) of a PS checkpoint; ValueError naming the file and the fault."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"MUSTERCK":
        raise ValueError("checkpoint %s: bad magic (not a muster checkpoint)" % path)
    if len(data) < 24:
        raise ValueError("checkpoint %s: truncated (%d bytes)" % (path, len(data)))
    version, body_len = struct.unpack_from("<IQ", data, 8)
    if version != 2:
        raise ValueError("checkpoint %s: version %d; this evaluator reads version 2" % (path, version))
    if len(data) != 20 + body_len + 4:
        raise ValueError("checkpoint %s: size mismatch: %d bytes, its header promises %d" % (path, len(data),
                                                                                            20 + body_len + 4))
    body = memoryview(data)[20:20 + body_len]
    if zlib.crc32(body) != struct.unpack_from("<I", data, 20 + body_len)[0]:
        raise ValueError("checkpoint %s: checksum mismatch (the file is damaged)" % path)
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from(fmt, body, pos)
        pos += struct.calcsize(fmt)
        return values[0]

    def name():
        nonlocal pos
        n = take("<I")
        pos += n
        return bytes(body[pos - n:pos]).decode()

    kind = name()
    if kind != "ps":
        raise ValueError("checkpoint %s: written by %r, not a ps checkpoint" % (path, kind))
    counters = {name(): take("<q") for _ in range(take("<I"))}
    values = {}
    for _ in range(take("<I")):
        key = name()
        count = take("<Q")
        values[key] = np.frombuffer(body, dtype="<f4", count=count, offset=pos)
        pos += 4 * count
    return counters["step"], values


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    _, _, _, dims = struct.unpack_from(">BBBB", data, 0)
    shape = struct.unpack_from(">" + "I" * dims, data, 4)
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise FileNotFoundError("%s(.gz) not in %s" % (stem, data_dir))


def accuracy(values, images, labels):
    x = images.reshape(len(images), 784).astype(np.float32) / 255.0
    for layer in ("fc1", "fc2", "fc3"):
        b = values[layer + "/bias"]
        w = values[layer + "/weight"].reshape(-1, len(b)).T  # column-major (out x in)
        x = x @ w.T + b
        if layer != "fc3":
            x = np.maximum(x, 0)
    return float(np.mean(np.argmax(x, axis=1) == labels))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--test-limit", type=int, default=2000)
    p.add_argument("--poll", type=float, default=0.2)
    args = p.parse_args()
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task", {})
    if task.get("type") != "evaluator" or "evaluator" in config.get("cluster", {}):
        sys.exit("evaluator.py: TF_CONFIG must name an evaluator task outside the cluster, got %r" % config)
    images = read_idx(find(args.data_dir, "t10k-images-idx3-ubyte"))[:args.test_limit]
    labels = read_idx(find(args.data_dir, "t10k-labels-idx1-ubyte"))[:args.test_limit]
    print("evaluator: watching %s (cluster %s)" % (args.checkpoint_dir, sorted(config["cluster"])), flush=True)
    seen = set()
    while True:
        for path in sorted(glob.glob(os.path.join(args.checkpoint_dir, "ckpt-*.bin"))):
            if path in seen:
                continue
            seen.add(path)
            step, values = read_checkpoint(path)
            print("eval step=%d test_accuracy=%.4f images=%d" % (step, accuracy(values, images, labels), len(labels)),
                  flush=True)
        time.sleep(args.poll)


if __name__ == "__main__":
    main()
