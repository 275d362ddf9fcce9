#!/usr/bin/env python3
"""Writes the checked-in seed corpora under tests/fuzz/corpus/<target>/.

Seeds are real inputs from the unit tests (request bodies, TF_CONFIGs,
ClusterSpecs, hostfiles, PS frames) plus their near misses. Re-run after
changing a format; regression seeds from fuzzer findings (crash-*) are added
by hand and never overwritten. File names are content hashes."""
import hashlib
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


# rest_request: first byte 0 launch, 1 await, 2 stop, 3 cluster create, 4 "METHOD path".
good_launch = {"n": 2, "cpu": 0.5, "memory": 2, "script": "train.py"}
launch_patches = [
    {}, {"n": 0}, {"n": -1}, {"n": 9}, {"n": 1e12}, {"n": 1.5}, {"n": "2"}, {"n": True},
    {"cpu": 0}, {"cpu": -0.5}, {"cpu": "1"}, {"memory": [1]}, {"nvidia_gpu": -1}, {"nvidia_gpu": 0.5},
    {"nvidia_gpu": -9223372036854775808}, {"nvidia_gpu": 18446744073709551615}, {"kernel": "ruby"},
    {"kernel": "bash", "script": None, "code": "echo hi"}, {"code": "print(1)"}, {"script": "/etc/passwd"},
    {"script": "../secret.py"}, {"script": "sub/../../secret.py"}, {"script": "sub/run.sh", "kernel": "executable"},
    {"script": "sub"}, {"script": "train.py\u0000x"}, {"env": []}, {"env": {"1BAD": "x"}}, {"env": {"A": 1}},
    {"env": {"OK_NAME": "v"}}, {"args": "a b"}, {"args": ["--lr", "0.1"]}, {"memroy": 2}, {"working_dir": "a b"},
]
for p in launch_patches:
    body = dict(good_launch)
    for k, v in p.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    write("rest_request", b"\x00" + json.dumps(body).encode())
for body in [{"ids": ["w-1", "w-2"], "timeout_seconds": 5}, {"ids": []}, {"ids": "w-1"}, {"ids": ["w-1"], "timeout_seconds": -1},
             {"ids": ["w-1"], "timeout_seconds": 1e308}, {"ids": ["a\u0000b"]}, {"ids": ["w-1"], "extra": 1}]:
    write("rest_request", b"\x01" + json.dumps(body).encode())
for body in [{"ids": ["w-1"]}, {"ids": ["w-1"] * 50}, {"ids": [1]}, {}, [], {"ids": ["w-1"], "grace_seconds": 2}]:
    write("rest_request", b"\x02" + json.dumps(body).encode())
for text in ['{"n_workers": 2}', "[]", "{}", '{"n_workers": 0}', '{"n_workers": "2"}', '{"n_workers": 5, "n_ps": 4}',
             '{"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "n_ps": 1}', '{"n_workers": 1, "launch": false}',
             '{"n_workers": 1, "env": {"A B": "x"}}', '{"n_workers": 1, "ssh_port": 70000}',
             '{"n_workers": 1, "network_interface": "eth0; id"}', '{"n_workers": 1, "timeout_seconds": -1}',
             '{"n_workers": 2, "n_ps": 1, "mode": "ps", "worker_script": "train.py", "ps_script": "ps.py", "args": ["--steps", "10"]}',
             '{"n_workers": 1, "nvidia_gpu": -9223372036854775808}', '{"n_workers": 1, "worker_script": "a\\u0000b"}']:
    write("rest_request", b"\x03" + text.encode())
for line in ["GET /healthz", "GET /api/v1/workers", "POST /api/v1/workers", "GET /api/v1/workers/w-1",
             "GET /api/v1/workers/w-1/logs", "POST /api/v1/workers/await", "DELETE /api/v1/workers",
             "POST /api/v1/agent/workers/w-1/heartbeat", "GET /api/v1/clusters/c-1", "POST /api/v1/clusters/c-1/stop",
             "GET /api/v1/workers//logs", "GET /api/v1/workers/%2e%2e/logs", "GET //api/v1/workers", "GET /api/v1/workers/",
             "GET ", "GET /api/v1/clusters/c-1/logs?tail=5", "POST /api/v1/clusters/await"]:
    write("rest_request", b"\x04" + line.encode())

# tf_config: TF_CONFIGs and ClusterSpecs from clusterspec's tests.
for text in [
    '{"cluster":{"ps":["10.0.0.7:2222"],"worker":["10.0.0.5:2222","10.0.0.6:2222"]},"environment":"cloud","task":{"index":1,"type":"worker"}}',
    '{"cluster":{"worker":{"0":"a:1","1":"b:1"}},"task":{"type":"worker"}}',
    '{"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":3}}',
    '{"cluster":{"worker":["a:1","b:1"],"ps":["p:1"]},"task":{"type":"ps","index":-1}}',
    '{"cluster":{"worker":["a:1","b:1"],"ps":["p:1"]},"task":{"type":"chief","index":0}}',
    '{"cluster":{"worker":["a:1","b:1"],"ps":["p:1"]},"task":{"type":"boss","index":0}}',
    '{"cluster":{"worker":["a:1","b:1"],"ps":["p:1"]},"task":{"type":"ps","index":"0"}}',
    '{"cluster":{"worker":["a:1","b:1"],"ps":["p:1"]},"task":{"type":"ps","index":0.5}}',
    '{"cluster":{"worker":["a:1","b:1"],"ps":["p:1"]},"task":{"type":"ps","index":0}}',
    '{"cluster":{"chief":["c:1"],"worker":["a:1","b:1"],"ps":["p:1","q:2"]},"task":{"type":"worker","index":1}}',
    '{"task":{"type":"ps"}}', '{"cluster":{},"task":{"type":"ps"}}',
    '{"cluster":{"chief":["a:1","b:1"]},"task":{"type":"chief"}}',
    '{"cluster":{"worker":["a:99999"]},"task":{"type":"worker"}}',
    '{"cluster":{"worker":["[::1]:2222"],"ps":["[fe80::1]:1"]},"task":{"type":"worker","index":0}}',
    '{"cluster":{"worker":["a:1"]},"task":{"type":"evaluator","index":0}}',
    '{"cluster":{"worker":["a:1"]},"task":{"type":"evaluator","index":1}}',
    '{"chief":["h4:1"],"ps":["h3:1"],"worker":["h1:1","h2:1"]}',
    '{"worker": {"1": "h:2", "0": "h:1"}, "ps": ["p:1"]}', '{"worker": {"0": "h:1", "2": "h:2"}}',
    '{"worker": {"a": "h:1"}}', '{"worker": {"-1": "h:1"}}', '{"worker": {"00": "h:1"}}',
    '{"worker":["w0","w1"]}', '{"worker":["a:1","a:1"]}', '{"worker":["a:0"]}', '{"worker":[":1"]}', '{"worker":["a:"]}',
    '{"worker":["a b:1"]}', '{"worker":[]}', 'null', '[]', '', '{"cluster":',
]:
    write("tf_config", text)

# hostfile
for text in ["10.0.0.5 slots=2\nnode-b slots=1\n",
             "# workers of cluster c-1\n\n   a   slots=2   # first\nb\n\tc slots=3 max_slots=4\r\n   \nd max-slots=2 slots=1",
             "", "# only a comment\n\n", "a\n\nb slots=x\n", "a slots=0", "a slots=-1", "a slots=1 slots=2", "a\na",
             "a foo", "a cpus=2", "ok\n$(reboot) slots=1", "a\x00", "a slots=4096", "a slots=4097",
             "a slots=99999999999999999999", "-a slots=1", ".a", "a max_slots=1", "a slots=1 max_slots=0",
             "h1 slots=1\nh2 slots=2\nh3 slots=3\nh4 slots=4\n", "a\tslots=2", "a slots=+2", "a slots= 2", "a slots=2x"]:
    write("hostfile", text)


# ps_frame: header (32 bytes) + payload.
def header(op, dtype=0, slc=0, aux=0, step=0, length=0, magic=0x5350534D, version=1):
    return struct.pack("<IHBBIIqQ", magic, version, op, dtype, slc, aux, step, length)


def hello(worker=0, r=2, t=2, mode=1, lr=0.05, opt=b"sgd", secret=b""):
    body = struct.pack("<IIIB3xf", worker, r, t, mode, lr) + opt.ljust(16, b"\0")
    return body + secret


for h in [hello(), hello(1), hello(secret=b"0123456789abcdef" * 4), hello(opt=b"adam", mode=2),
          hello(opt=b"momentum", lr=float("nan")), hello(r=0), hello(t=0), hello(worker=7, secret=b"x" * 256),
          hello(opt=b"x" * 16)]:
    write("ps_frame", header(1, length=len(h)) + h)
write("ps_frame", header(1, length=36) + hello()[:20])
write("ps_frame", header(1, length=36) + hello() + b"x" * 300)
for op, dtype, slc, aux, step, length in [(2, 1, 0, 0, 0, 4096), (2, 1, 3, 2, 10, 3 * 4096), (3, 1, 0, 0, 5, 4096),
                                          (4, 0, 0, 0, 6, 0), (6, 0, 1, 0, 0, 0), (8, 0, 2, 0, 0, 0), (5, 1, 0, 0, 0, 16),
                                          (7, 0, 0, 1, 0, 5), (9, 1, 0, 2, 3, 48), (0, 0, 0, 0, 0, 0), (99, 0, 0, 0, 0, 0),
                                          (3, 77, 0, 0, 0, 8), (2, 1, 0, 0, 0, 1 << 40), (4, 0, 0xFFFFFFFF, 0, -1, 0)]:
    write("ps_frame", header(op, dtype, slc, aux, step, length) + b"\x01\x02\x03\x04" * 4)
write("ps_frame", header(1, magic=0xDEADBEEF, length=36) + hello())
write("ps_frame", header(1, version=9, length=36) + hello())
