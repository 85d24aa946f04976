"""Matching one request against 1,000 permission rules (Claude Code's syntax, `domain.rule_patterns`).

The rules are a realistic mix (1,000): Bash exact commands, prefixes and wildcards; Read/Edit
gitignore paths from each root; WebFetch hosts and subdomains; MCP servers and tools; bare tools;
remembered exact inputs; about 70% allow, 15% ask, 15% deny. The requests cycle through simple and
compound commands (with substitutions), file edits and reads inside and outside the project, fetches
and MCP calls, most matching some rule and some none. Each sample is one `RuleSet.decide` on a
compiled set (the service compiles a scope's rules once and reuses them), timed twice: on the wall
clock, and on this thread's CPU clock, which a busy machine's preemption does not inflate (the load
average is recorded beside). The target: p99 at most 1 ms. Compiling the set is reported too.

`python -m bench rules`; TURNWISE_BENCH_RULE_SAMPLES (default 20,000). Results: bench/results/rules.json.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from backend.domain.rule_patterns import Behavior, RulePattern, RuleSet
from backend.domain.rule_syntax import parse_pattern
from bench.common import pct, write_result

RULES = 1_000
SAMPLES = int(os.environ.get("TURNWISE_BENCH_RULE_SAMPLES", "20000"))
TARGET_P99_MS = 1.0
PROJECT = "/home/shop"
HOME = "/home/ana"
WORDS = ["build", "test", "lint", "deploy", "status", "log", "diff", "fmt", "check", "run", "sync", "pull"]
TOOLS = ["npm", "git", "cargo", "make", "docker", "kubectl", "pytest", "ruff", "go", "yarn", "pip", "uv"]
FOLDERS = ["src", "lib", "tests", "docs", "scripts", "config", "app", "web", "api", "infra"]


def rule_texts(rng: random.Random) -> list[str]:
    """1,000 rule texts in the proportions a busy project's settings might hold."""
    texts: list[str] = []
    for i in range(RULES):
        tool, word, folder = rng.choice(TOOLS), rng.choice(WORDS), rng.choice(FOLDERS)
        kind = i % 20
        if kind < 4:
            texts.append(f"Bash({tool} {word} --target t{i})")
        elif kind < 8:
            texts.append(f"Bash({tool} {word}{i}:*)")
        elif kind < 10:
            texts.append(f"Bash({tool} * {word}{i})")
        elif kind < 13:
            texts.append(f"Edit({folder}/m{i}/**)")
        elif kind == 13:
            texts.append(f"Read(//etc/s{i}/**)" if i % 2 else f"Read(~/.config/c{i}/**)")
        elif kind == 14:
            texts.append(f"Read(**/*.k{i})")
        elif kind == 15:
            texts.append(f"WebFetch(domain:h{i}.example.com)" if i % 2 else f"WebFetch(domain:*.d{i}.io)")
        elif kind == 16:
            texts.append(f"mcp__srv{i}" if i % 2 else f"mcp__github__tool{i}")
        elif kind == 17:
            texts.append(f'mcp__db__query(={{"sql":"select {i}"}})')
        elif kind == 18:
            texts.append(f"Tool{i}")
        else:
            texts.append(f"Bash(echo {word} {i} *)")
    texts[-5:] = ["Bash(npm test:*)", "Bash(git status)", "Edit(src/**)", "mcp__github", "Read"]
    return texts


def compiled(texts: list[str], rng: random.Random) -> tuple[RuleSet, list[tuple[Behavior, RulePattern, Any]]]:
    behaviors = [Behavior.ALLOW] * 14 + [Behavior.ASK] * 3 + [Behavior.DENY] * 3
    rules = [(rng.choice(behaviors), parse_pattern(text), f"rule-{i}") for i, text in enumerate(texts)]
    return RuleSet.compile(rules), rules


def requests() -> list[tuple[str, dict[str, Any]]]:
    return [
        ("Bash", {"command": "npm test -- --watch"}),
        ("Bash", {"command": "git status"}),
        ("Bash", {"command": "npm test && git status"}),
        ("Bash", {"command": "cargo build500:x --release"}),
        ("Bash", {"command": 'echo "$(git log -1)" | tee out.txt && npm test; make lint'}),
        ("Bash", {"command": "kubectl -n staging rollout restart deploy/api"}),
        ("Bash", {"command": "FOO=1 sudo rm -rf /tmp/x && echo done"}),
        ("Edit", {"file_path": f"{PROJECT}/src/app/main.py", "old_string": "a", "new_string": "b"}),
        ("Write", {"file_path": f"{PROJECT}/docs/m999/guide.md", "content": "x"}),
        ("Read", {"file_path": f"{HOME}/.config/c13/settings.json"}),
        ("Read", {"file_path": "/etc/passwd"}),
        ("Edit", {"file_path": "/tmp/elsewhere/file.txt", "old_string": "a", "new_string": "b"}),
        ("WebFetch", {"url": "https://h15.example.com/page", "prompt": "summarize"}),
        ("WebFetch", {"url": "https://api.unknown.org/x", "prompt": "summarize"}),
        ("mcp__github__get_issue", {"number": 7}),
        ("mcp__db__query", {"sql": "select 17"}),
        ("mcp__other__tool", {"x": 1}),
        ("Tool38", {"anything": True}),
        ("Unruled", {"anything": True}),
    ]


def run() -> dict[str, Any]:
    rng = random.Random(38)
    texts = rule_texts(rng)
    start = time.perf_counter()
    ruleset, rules = compiled(texts, rng)
    compile_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    RuleSet.compile(rules)  # the same rules again: read once, their regexes in re's cache
    recompile_ms = (time.perf_counter() - start) * 1000
    calls = requests()
    decided = sum(ruleset.decide(t, i, project=PROJECT, home=HOME) is not None for t, i in calls)
    for tool, tool_input in calls * 20:  # warm up
        ruleset.decide(tool, tool_input, project=PROJECT, home=HOME)
    samples: list[float] = []
    cpu: list[float] = []
    for n in range(SAMPLES):
        tool, tool_input = calls[n % len(calls)]
        begin, begin_cpu = time.perf_counter(), time.thread_time()
        ruleset.decide(tool, tool_input, project=PROJECT, home=HOME)
        cpu.append(time.thread_time() - begin_cpu)
        samples.append(time.perf_counter() - begin)
    p50, p99 = pct(samples, 50) * 1000, pct(samples, 99) * 1000
    cpu_p50, cpu_p99 = pct(cpu, 50) * 1000, pct(cpu, 99) * 1000
    return {
        "rules": len(rules),
        "behaviors": {b.value: sum(r[0] is b for r in rules) for b in Behavior},
        "requests": len(calls),
        "requests_decided_by_a_rule": decided,
        "samples": SAMPLES,
        "compile_ms": round(compile_ms, 2),
        "recompile_ms": round(recompile_ms, 2),
        "decide_p50_ms": round(p50, 4),
        "decide_p99_ms": round(p99, 4),
        "decide_max_ms": round(max(samples) * 1000, 4),
        "decide_cpu_p50_ms": round(cpu_p50, 4),
        "decide_cpu_p99_ms": round(cpu_p99, 4),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "targets": [
            {
                "target": f"p99 of one decision over {RULES} rules <= {TARGET_P99_MS} ms (CPU)",
                "value": round(cpu_p99, 4),
                "met": cpu_p99 <= TARGET_P99_MS,
            },
            {
                "target": f"p99 of one decision over {RULES} rules <= {TARGET_P99_MS} ms (wall)",
                "value": round(p99, 4),
                "met": p99 <= TARGET_P99_MS,
            },
        ],
    }


def main() -> None:
    result = run()
    print(
        f"  {result['rules']} rules ({result['behaviors']}), {result['requests']} kinds of request "
        f"({result['requests_decided_by_a_rule']} decided by a rule), read and compiled in "
        f"{result['compile_ms']} ms, compiled again in {result['recompile_ms']} ms"
    )
    print(
        f"  one decision: p50 {result['decide_p50_ms']} ms, p99 {result['decide_p99_ms']} ms, "
        f"max {result['decide_max_ms']} ms over {result['samples']} samples (wall)"
    )
    print(
        f"  one decision on the thread's CPU clock: p50 {result['decide_cpu_p50_ms']} ms, "
        f"p99 {result['decide_cpu_p99_ms']} ms (load average {result['load_average'][0]:.1f} "
        f"on {result['cpus']} CPUs)"
    )
    for t in result["targets"]:
        print(f"  {'MET' if t['met'] else 'NOT MET':<9} {t['target']}: {t['value']}")
    print(f"  written to {write_result('rules', result).name}")
