#!/usr/bin/env python3
"""A load test of `fafo serve` on loopback, bounded in time.

CLIENTS clients send greedy requests of random prompts and lengths (completions and
chats, streamed and not) to a server of PARALLEL slots; a quarter of the streamed ones
disconnect after the first chunk; one device fault is injected into the server's backend
(FAFO_INJECT_FAULT, default lost at step 2000: the slot loads the weights again and the
other slots move to them). At the end it checks:
  - no wrong answer: every completion answered in full equals `fafo run --json`'s text
    for its prompt and length (computed first, one process per pair); every chat answer
    equals the server's answer to the same chat asked alone, before the load;
  - errors only from the fault: at most PARALLEL requests answered 500 (those in flight
    when it struck), none otherwise, and no request refused or lost;
  - every slot free afterwards (/metrics: fafo_slots_busy 0, fafo_queue_depth 0);
  - no load of the weights kept after the fault's reload (/metrics: fafo_weight_loads
    at the end as before the load);
  - the server's resident memory after the first sixth of the run grows by at most 5 %.
Prints a summary; exits 0 when every check holds, 1 otherwise.

  tools/soak.py [--fafo build/app/cli/fafo] [-m MODEL] [--seconds 600] [--clients 8]
                [--parallel 4] [--backend cpu] [--threads 2] [--fault lost:2000]
"""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

PROMPTS = [
    "Once upon a time", "Lily and Tom went to the park.", "The little dog", "One day, a big bear",
    "Sam had a red ball.", "The sun was hot and", "Mom said to Ben", "In the garden there was",
    "The cat and the bird", "Tim wanted to play",
]
LENGTHS = [8, 24, 48]
CHATS = ["Tell me a story.", "What is a cat?", "Say hello.", "Who is Lily?"]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def fafo_run_text(args, prompt, n):
    cmd = [args.fafo, "run", "--json", "-m", args.model, "-p", prompt, "-n", str(n), "--temp", "0",
           "--strategy", "ar", "--backend", args.backend, "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"soak: {' '.join(cmd)} failed: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)["text"]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.wrong = []

    def add(self, key):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1


def request(port, path, body, stream, disconnect):
    """Returns (status, text, finish_reason, complete); text is the answer's content."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if not stream or r.status != 200:
            data = r.read()
            if r.status != 200:
                return r.status, "", None, False
            j = json.loads(data)
            if "error" in j:  # a generation that failed on the device after the status was sent
                return 500, "", None, False
            choice = j["choices"][0]
            text = choice["text"] if "text" in choice else choice["message"]["content"]
            return 200, text, choice.get("finish_reason"), True
        text, finish, chunks = "", None, 0
        while True:
            line = r.readline()
            if not line:
                return 200, text, finish, False
            line = line.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                return 200, text, finish, finish is not None
            j = json.loads(payload)
            if "error" in j:
                return 500, text, None, False
            choice = j["choices"][0]
            text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            finish = choice.get("finish_reason") or finish
            chunks += 1
            if disconnect and chunks >= 1:
                return 200, text, None, False  # the socket closes below, mid-stream
    finally:
        c.close()


def client(args, port, deadline, want, tally, seed):
    rng = random.Random(seed)
    while time.time() < deadline:
        stream = rng.random() < 0.5
        disconnect = stream and rng.random() < 0.25
        n = rng.choice(LENGTHS)
        if rng.random() < 0.7:
            prompt = rng.choice(PROMPTS)
            body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": stream}
            path, key = "/v1/completions", ("completion", prompt, n)
        else:
            user = rng.choice(CHATS)
            body = {"messages": [{"role": "user", "content": user}], "max_tokens": n, "temperature": 0, "stream": stream}
            path, key = "/v1/chat/completions", ("chat", user, n)
        try:
            status, text, finish, complete = request(port, path, body, stream, disconnect)
        except (OSError, http.client.HTTPException, ValueError) as e:
            tally.add("transport error")
            with tally.lock:
                tally.wrong.append(f"{key}: {type(e).__name__}: {e}")
            continue
        if disconnect:
            tally.add("disconnected")
            continue
        if status != 200:
            tally.add(f"http {status}")
            continue
        if not complete:
            tally.add("cut short")
            with tally.lock:
                tally.wrong.append(f"{key}: the answer ended without a finish reason")
            continue
        tally.add("answered")
        with tally.lock:
            expected = want.get(key)
            if text != expected:
                tally.wrong.append(f"{key}: got {text!r}, want {expected!r}")


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    m = re.search(rf"^{name} (\d+)", body, re.M)
    return int(m.group(1)) if m else None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fafo", default=os.path.join(here, "..", "build", "app", "cli", "fafo"))
    p.add_argument("-m", "--model", default=os.path.join(here, "..", "..", "shared", "models", "stories260K.gguf"))
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--fault", default="lost:2000", help="FAFO_INJECT_FAULT for the server ('' for none)")
    args = p.parse_args()
    for path, what in ((args.fafo, "the fafo program"), (args.model, "the model")):
        if not os.path.exists(path):
            sys.exit(f"soak: {what} {path} does not exist")

    start = time.time()
    want = {("completion", prompt, n): fafo_run_text(args, prompt, n) for prompt in PROMPTS for n in LENGTHS}
    print(f"soak: {len(want)} answers of fafo run in {time.time() - start:.1f} s", flush=True)

    env = dict(os.environ)
    if args.fault:
        env["FAFO_INJECT_FAULT"] = args.fault
    server = subprocess.Popen([args.fafo, "serve", "-m", args.model, "--port", "0", "--parallel", str(args.parallel),
                               "--queue", str(4 * args.clients), "--backend", args.backend, "--threads", str(args.threads),
                               "-c", "512"], stderr=subprocess.PIPE, text=True, env=env)
    port = None
    started = time.time()
    while port is None and time.time() - started < 300:
        line = server.stderr.readline()
        if not line:
            break
        m = re.search(r"on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        server.kill()
        sys.exit("soak: the server did not start: " + (server.stderr.read() or "")[-400:])
    threading.Thread(target=lambda: server.stderr.read(), daemon=True).start()  # keeps its pipe drained
    # The chats' answers, asked one at a time before the load.
    for user in CHATS:
        for n in LENGTHS:
            body = {"messages": [{"role": "user", "content": user}], "max_tokens": n, "temperature": 0}
            status, text, _, _ = request(port, "/v1/chat/completions", body, False, False)
            if status != 200:
                server.kill()
                sys.exit(f"soak: the chat {user!r} alone was answered {status}")
            want[("chat", user, n)] = text

    loads_before = metric(port, "fafo_weight_loads")
    tally = Tally()
    deadline = time.time() + args.seconds
    rss, settle = [], args.seconds / 6
    clients = [threading.Thread(target=client, args=(args, port, deadline, want, tally, i)) for i in range(args.clients)]
    for t in clients:
        t.start()
    t0 = time.time()
    while any(t.is_alive() for t in clients):
        rss.append((time.time() - t0, rss_kib(server.pid)))
        time.sleep(0.5)
    for t in clients:
        t.join()
    time.sleep(0.5)  # a disconnected stream's slot is freed at its next token
    busy, waiting = metric(port, "fafo_slots_busy"), metric(port, "fafo_queue_depth")
    loads_after = metric(port, "fafo_weight_loads")
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        tally.wrong.append("the server did not stop within 60 s of SIGTERM")

    settled = [k for t, k in rss if t >= settle and k > 0]
    base = settled[0] if settled else 0
    peak = max(settled) if settled else 0
    growth = (peak - base) / base if base else 0.0
    errors = tally.counts.get("http 500", 0)
    other = {k: v for k, v in tally.counts.items() if k.startswith("http ") and k != "http 500"}
    print(f"soak: {args.seconds:.0f} s, {args.clients} clients, {args.parallel} slots, fault {args.fault or 'none'}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(tally.counts.items())))
    last = settled[-1] if settled else 0
    print(f"soak: resident memory {base / 1024:.1f} MiB at {settle:.0f} s, peak after {peak / 1024:.1f} MiB "
          f"({100 * growth:+.1f} %), at the end {last / 1024:.1f} MiB; slots busy at the end {busy}, waiting {waiting}; "
          f"loads of the weights {loads_before} before, {loads_after} at the end")
    problems = list(tally.wrong)
    if errors > args.parallel or (errors > 0 and not args.fault):
        problems.append(f"{errors} requests answered 500 (the fault allows at most {args.parallel if args.fault else 0})")
    if other:
        problems.append(f"unexpected statuses: {other}")
    if busy != 0 or waiting != 0:
        problems.append(f"slots not freed: {busy} busy, {waiting} waiting")
    if loads_after != loads_before:
        problems.append(f"loads of the weights alive: {loads_before} before the load, {loads_after} at the end")
    if growth > 0.05:
        problems.append(f"resident memory grew by {100 * growth:.1f} % after the first {settle:.0f} s (at most 5 %)")
    if tally.counts.get("answered", 0) == 0:
        problems.append("no request was answered in full")
    for problem in problems[:20]:
        print("soak: FAIL: " + problem)
    print("soak: " + ("all checks passed" if not problems else f"{len(problems)} problems"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
