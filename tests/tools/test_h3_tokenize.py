#!/usr/bin/env python3
"""Runs h3-tokenize on the golden strings (one JSON string per stdin line) and
compares every output line with the golden ids; checks the exit status and the
one-line error for bad arguments, a bad tokenizer and a bad input line.
usage: test_h3_tokenize.py H3_TOKENIZE_EXE TEST_DATA_DIR"""
import json
import os
import subprocess
import sys

exe, data = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", msg, file=sys.stderr)


def run(args, stdin=""):
    return subprocess.run([exe] + args, input=stdin.encode(), capture_output=True, timeout=120)


goldens = json.load(open(os.path.join(data, "goldens/common/tokenizer_goldens.json")))["entries"]
lines = "".join(json.dumps(e["text"]) + "\n" for e in goldens)

cases = [
    (["--tokenizer", os.path.join(data, "models/tiny-h3/tokenizer")], "tiny_transformers"),
    (["--tokenizer", os.path.join(data, "models/tiny-h3/tokenizer"), "--mode", "tokenizers"], "tiny_tokenizers"),
    (["--tokenizer", os.path.join(data, "official/tokenizer")], "real_transformers"),
    (["--tokenizer", os.path.join(data, "tokenizers/qwen3"), "--mode", "tokenizers"], "real_tokenizers"),
]
for args, column in cases:
    r = run(args, lines)
    check(r.returncode == 0, f"{args}: exit {r.returncode}: {r.stderr.decode()}")
    out = r.stdout.decode().splitlines()
    check(len(out) == len(goldens), f"{column}: {len(out)} lines for {len(goldens)} inputs")
    ok = 0
    for e, o in zip(goldens, out):
        same = json.loads(o) == e[column]
        ok += same
        check(same, f"{column}: {e['text']!r}: got {o} want {e[column]}")
    print(f"h3-tokenize {column}: {ok}/{len(goldens)} exact")

tiny = os.path.join(data, "models/tiny-h3/tokenizer")
for args, what in [([], "no --tokenizer"), (["--bogus"], "unknown flag"),
                   (["--tokenizer", "/nonexistent"], "missing tokenizer dir"),
                   (["--tokenizer", tiny, "--mode", "slow"], "bad mode"),
                   (["--tokenizer", os.path.join(data, "official/tokenizer"), "--mode", "tokenizers"],
                    "tokenizers mode without tokenizer.json")]:
    r = run(args, '"x"\n')
    err = r.stderr.decode()
    check(r.returncode == 2 and err.count("\n") == 1 and not r.stdout, f"{what}: exit {r.returncode}, stderr {err!r}")

# NUL survives the JSON decoding: byte 0x00 is byte symbol id 188 (docs/spec/h3-conditioner.md §4.1);
# a surrogate pair is one code point (U+1F3AC, as in the golden "naïve café 日本 🎬").
r = run(["--tokenizer", tiny], '"a\\u0000b"\n"\\ud83c\\udfac"\n')
check(r.returncode == 0 and r.stdout.decode() == "[64, 188, 65]\n[172, 253, 236, 105]\n",
      f"escapes: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")

r = run(["--tokenizer", tiny], '"ok"\nnot json\n"never"\n')
check(r.returncode == 1 and r.stdout.decode() == "[562]\n" and "line 2" in r.stderr.decode(),
      f"bad input line: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")

# Issue 31: a line of 100,000 '[' used to overflow json-glib's recursion (SIGSEGV); now the
# line is refused by the nesting bound, after the lines before it were written.
r = run(["--tokenizer", tiny], '"ok"\n' + "[" * 100000 + "\n")
check(r.returncode == 1 and r.stdout.decode() == "[562]\n" and "line 2" in r.stderr.decode()
      and "256 levels" in r.stderr.decode(), f"deep line: exit {r.returncode}, stderr {r.stderr[:300]!r}")

print(f"test_h3_tokenize: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
