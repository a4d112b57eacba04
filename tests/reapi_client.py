"""A small REAPI client for the worker tests, run with the BuildGrid venv's Python (it has
grpcio and BuildGrid's generated protos). Reads a JSON list of action specs on stdin, submits
them all at once (Execute, one thread each), waits, and prints a JSON list of results.

Usage: python reapi_client.py HOST:PORT INSTANCE [CAS_HOST:PORT]

Spec keys: args, env {}, cwd, files {path: text | {"text", "exec"}}, symlinks {path: target},
output_files [], output_dirs [], output_paths [], timeout (s), platform {}, missing_input
(bool: reference a file blob that is not uploaded).
Result keys: code, message, violations [[type, subject]], exit_code, stdout, stderr,
files {path: {size, sha256, exec, text?}}, dirs {path: {relpath: {size, exec, text?}}},
symlinks {path: target}, meta {field: seconds}, missing_digest.
"""

import hashlib
import json
import os
import sys
import threading
import time
import uuid

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2 as bs
from buildgrid._protos.google.bytestream import bytestream_pb2_grpc as bs_grpc
from buildgrid._protos.google.rpc import error_details_pb2

REMOTE, INSTANCE = sys.argv[1], sys.argv[2]
# The CAS and ByteStream server, when it is not REMOTE (a farm with its CAS apart: Bazel's
# --remote_cache beside --remote_executor).
CAS_REMOTE = sys.argv[3] if len(sys.argv) > 3 else REMOTE
OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
channel = grpc.insecure_channel(REMOTE, options=OPTIONS)
cas_channel = grpc.insecure_channel(CAS_REMOTE, options=OPTIONS) if CAS_REMOTE != REMOTE else channel
cas = re_grpc.ContentAddressableStorageStub(cas_channel)
execution = re_grpc.ExecutionStub(channel)
bytestream = bs_grpc.ByteStreamStub(cas_channel)


def digest(data):
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def upload(blobs):
    reqs = [re.BatchUpdateBlobsRequest.Request(digest=digest(b), data=b) for b in blobs]
    if reqs:
        resp = cas.BatchUpdateBlobs(re.BatchUpdateBlobsRequest(instance_name=INSTANCE, requests=reqs))
        for r in resp.responses:
            assert r.status.code == 0, r.status


def read(d):
    name = f"{INSTANCE}/blobs/{d.hash}/{d.size_bytes}" if INSTANCE else f"blobs/{d.hash}/{d.size_bytes}"
    if d.size_bytes == 0:
        return b""
    return b"".join(r.data for r in bytestream.Read(bs.ReadRequest(resource_name=name)))


def build_tree(files, symlinks, blobs, missing):
    """files: {path: (bytes, exec)} -> root Directory digest, adding every blob to `blobs`."""
    tree = {}
    for path, content in list(files.items()) + [(p, ("symlink", t)) for p, t in symlinks.items()]:
        parts = path.split("/")
        node = tree
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = content

    def encode(node):
        d = re.Directory()
        for name in sorted(node):
            v = node[name]
            if isinstance(v, dict):
                sub = encode(v)
                d.directories.add(name=name, digest=sub)
            elif v[0] == "symlink":
                d.symlinks.add(name=name, target=v[1])
            elif v[0] == "missing":
                d.files.add(name=name, digest=v[1])
            else:
                blobs.append(v[0])
                d.files.add(name=name, digest=digest(v[0]), is_executable=v[1])
        data = d.SerializeToString()
        blobs.append(data)
        return digest(data)

    return encode(tree)


def file_info(d, is_exec=None):
    data = read(d)
    info = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert info["sha256"] == d.hash, "an output's bytes do not match its digest"
    if is_exec is not None:
        info["exec"] = is_exec
    if len(data) <= 4096:
        info["text"] = data.decode(errors="replace")
    return info


def tree_files(tree_digest):
    tree = re.Tree.FromString(read(tree_digest))
    by_digest = {digest(c.SerializeToString()).hash: c for c in tree.children}
    out = {}

    def walk(d, prefix):
        for f in d.files:
            out[prefix + f.name] = file_info(f.digest, f.is_executable)
        for s in d.symlinks:
            out[prefix + s.name] = {"symlink": s.target}
        for sub in d.directories:
            out[prefix + sub.name + "/"] = {"dir": True}
            walk(by_digest[sub.digest.hash], prefix + sub.name + "/")

    walk(tree.root, "")
    return out


def run(spec):
    blobs = []
    files = {}
    for path, v in spec.get("files", {}).items():
        if isinstance(v, str):
            v = {"text": v}
        files[path] = (v["text"].encode(), bool(v.get("exec")))
    missing = None
    if spec.get("missing_input"):
        missing = digest(uuid.uuid4().bytes * 3)
        files["missing.bin"] = ("missing", missing)
    root = build_tree(files, spec.get("symlinks", {}), blobs, missing)
    cmd = re.Command(arguments=spec["args"], working_directory=spec.get("cwd", ""))
    for k, v in sorted(spec.get("env", {}).items()):
        cmd.environment_variables.add(name=k, value=v)
    cmd.output_files.extend(sorted(spec.get("output_files", [])))
    cmd.output_directories.extend(sorted(spec.get("output_dirs", [])))
    cmd.output_paths.extend(sorted(spec.get("output_paths", [])))
    platform = re.Platform()
    for k, v in sorted(spec.get("platform", {}).items()):
        platform.properties.add(name=k, value=v)
    cmd.platform.CopyFrom(platform)
    cmd_data = cmd.SerializeToString()
    blobs.append(cmd_data)
    action = re.Action(command_digest=digest(cmd_data), input_root_digest=root, do_not_cache=True)
    action.platform.CopyFrom(platform)
    if spec.get("timeout"):
        action.timeout.FromNanoseconds(int(spec["timeout"] * 1e9))
    action_data = action.SerializeToString()
    blobs.append(action_data)
    upload(blobs)
    ops = execution.Execute(re.ExecuteRequest(instance_name=INSTANCE, action_digest=digest(action_data),
                                              skip_cache_lookup=True), timeout=300)
    last = None
    # The server may restart meanwhile (the reliability test does that): follow the operation
    # with WaitExecution until it is done.
    deadline = time.monotonic() + 300
    while True:
        try:
            for op in ops:
                last = op
            if last is not None and last.done:
                break
        except grpc.RpcError:
            if last is None or time.monotonic() > deadline:
                # Before the operation had a name there is nothing to wait for: the caller
                # tries the whole action again if the server was only unavailable.
                raise
            time.sleep(0.5)
        if last is None:
            raise RuntimeError("Execute failed before naming its operation")
        ops = execution.WaitExecution(re.WaitExecutionRequest(name=last.name), timeout=300)
    resp = re.ExecuteResponse()
    last.response.Unpack(resp)
    r = resp.result
    out = {"code": resp.status.code, "message": resp.status.message, "exit_code": r.exit_code,
           "violations": [], "files": {}, "dirs": {}, "symlinks": {}, "meta": {}}
    for detail in resp.status.details:
        pf = error_details_pb2.PreconditionFailure()
        if detail.Unpack(pf):
            out["violations"] += [[v.type, v.subject] for v in pf.violations]
    if missing is not None:
        out["missing_digest"] = f"{missing.hash}/{missing.size_bytes}"
    out["stdout"] = read(r.stdout_digest).decode(errors="replace") if r.HasField("stdout_digest") else r.stdout_raw.decode()
    out["stderr"] = read(r.stderr_digest).decode(errors="replace") if r.HasField("stderr_digest") else r.stderr_raw.decode()
    for f in r.output_files:
        out["files"][f.path] = file_info(f.digest, f.is_executable)
    for d in r.output_directories:
        out["dirs"][d.path] = tree_files(d.tree_digest)
    for s in list(r.output_symlinks) + list(r.output_file_symlinks) + list(r.output_directory_symlinks):
        out["symlinks"][s.path] = s.target
    m = r.execution_metadata
    out["worker"] = m.worker
    for field in ("queued_timestamp", "worker_start_timestamp", "input_fetch_start_timestamp",
                  "input_fetch_completed_timestamp", "execution_start_timestamp",
                  "execution_completed_timestamp", "output_upload_start_timestamp",
                  "output_upload_completed_timestamp", "worker_completed_timestamp"):
        if m.HasField(field):
            ts = getattr(m, field)
            out["meta"][field] = ts.seconds + ts.nanos / 1e9
    return out


def main():
    specs = json.load(sys.stdin)
    results = [None] * len(specs)

    def one(i):
        # As Bazel's --remote_retries: a call refused while the server is down or restarting
        # (UNAVAILABLE) is tried again, the whole action, for up to 3 minutes.
        deadline = time.monotonic() + 180
        attempts = 0
        while True:
            attempts += 1
            try:
                results[i] = run(specs[i])
                if attempts > 1:  # an Execute sent again may run the action again
                    results[i]["attempts"] = attempts
                return
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline:
                    time.sleep(1)
                    continue
                results[i] = {"error": f"{type(e).__name__}: {e}"}
                return
            except Exception as e:  # reported to the test, which fails with it
                results[i] = {"error": f"{type(e).__name__}: {e}"}
                return

    # At most 32 at once: each holds an Execute stream, and BuildGrid's thread pool bounds
    # its concurrent RPCs. SPAWNKIT_REAPI_IN_FLIGHT sets fewer (1: one action at a time).
    from concurrent.futures import ThreadPoolExecutor
    in_flight = max(1, min(32, int(os.environ.get("SPAWNKIT_REAPI_IN_FLIGHT", "32"))))
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        list(pool.map(one, range(len(specs))))
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
