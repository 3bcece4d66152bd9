"""What the GPU run's steps share: stopping a process group, markdown blocks, the
machine's own commands, and the JSON that fafo's programs print."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess

LOG_LIMIT = 16 * 1024 * 1024  # the most a log file in OUT_DIR holds
NVIDIA_ICD = "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json"


def kill_group(p: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL 1.5 s later (within the 3 s kept at the end)."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=1.5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def code_block(text: str, max_lines: int = 80) -> str:
    lines = text.rstrip().splitlines()
    if len(lines) > max_lines:
        lines = lines[: max_lines // 2] + [f"... ({len(lines) - max_lines} lines left out: steps.log has them)"] + lines[-max_lines // 2:]
    return "```\n" + "\n".join(lines) + "\n```"


def tail(text: str, n: int = 15) -> str:
    return code_block("\n".join(text.rstrip().splitlines()[-n:]), n + 1)


def shell_out(argv: list[str], timeout: float = 10) -> str:
    """What the command printed on stdout when it succeeded; "" when it failed or did not finish."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def ldconfig_find(name: str) -> str:
    """The path ldconfig's cache gives for a library, or ""."""
    ldconfig = next((c for c in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(c)), "ldconfig")
    for line in shell_out([ldconfig, "-p"]).splitlines():
        if line.strip().startswith(name + " ") and "=>" in line:
            return line.split("=>", 1)[1].strip()
    return ""


def bench_json(text: str) -> dict:
    """The last JSON object a program printed at the start of a line (stderr's lines, merged
    into the same text, may come before or after it)."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^\{", text)]
    for at in reversed(starts):
        try:
            value, _ = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object in the output")
