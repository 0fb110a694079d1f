#!/usr/bin/env python3
"""h3-generate --image on the tiny model reproduces the official FL2VA
end-to-end golden (e2e_fl2va_3steps: the PNG keyframe, seed 42, 2 forwards):
uint8 frames within 1, audio rel-L2 <= 1e-4; and bad keyframe files are
refused at once, by name, with exit status 2; h3-generate --reference
image:FILE (and image + audio:FILE.wav) reproduces the Ref2VA goldens
e2e_ref2va_image_3steps and e2e_ref2va_audio_3steps (uint8 within 1, audio
rel-L2 <= 1e-3) (python3, stdlib only).
usage: test_h3_generate.py H3_GENERATE_EXE TEST_DATA_DIR"""
import array
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

exe, data = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", msg, file=sys.stderr)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], blob[lo:hi])
    return out


golden_json = json.load(open(os.path.join(data, "goldens/tiny-h3/e2e_fl2va_3steps.json")))
q = golden_json["request"]
png = os.path.join(data, q["image"])
tmp = tempfile.mkdtemp(prefix="h3-generate-")
out = os.path.join(tmp, "fl2va.safetensors")
base = [exe, "--model", os.path.join(data, "models/tiny-h3"), "--compute", "cpu", "--prompt", q["prompt"],
        "--seed", str(q["seed"]), "--width", str(q["width"]), "--height", str(q["height"]),
        "--num-frames", str(q["num_frames"]), "--steps", str(golden_json["forwards"]), "--quiet"]
r = subprocess.run(base + ["--image", png, "--output", out], capture_output=True, timeout=600)
check(r.returncode == 0, "h3-generate --image: exit %d: %s" % (r.returncode, r.stderr.decode()))
if r.returncode == 0:
    mine = read_safetensors(out)
    gold = read_safetensors(os.path.join(data, "goldens/tiny-h3/e2e_fl2va_3steps.safetensors"))
    v, gv = mine["video"][2], gold["videos_uint8"][2]
    check(len(v) == len(gv), "video bytes %d vs golden %d" % (len(v), len(gv)))
    maxd = max((abs(a - b) for a, b in zip(v, gv)), default=99)
    check(maxd <= 1, "uint8 frames differ by up to %d" % maxd)
    a, ga = array.array("f", mine["audio"][2]), array.array("f", gold["audio"][2])
    num = sum((x - y) ** 2 for x, y in zip(a, ga))
    den = sum(y * y for y in ga) or 1.0
    rel = math.sqrt(num / den)
    check(len(a) == len(ga) and rel <= 1e-4, "audio rel L2 %.3g (%d vs %d samples)" % (rel, len(a), len(ga)))
    print("h3-generate --image: uint8 max |diff| %d, audio rel L2 %.3g" % (maxd, rel))

# --memory stream: the same clip, byte for byte; --plan shows the mode; a bad mode is refused
if r.returncode == 0:
    out_s = os.path.join(tmp, "fl2va-stream.safetensors")
    rs = subprocess.run(base + ["--image", png, "--memory", "stream", "--output", out_s], capture_output=True,
                        timeout=600)
    check(rs.returncode == 0, "h3-generate --memory stream: exit %d: %s" % (rs.returncode, rs.stderr.decode()))
    if rs.returncode == 0:
        streamed = read_safetensors(out_s)
        check(streamed["video"][2] == mine["video"][2] and streamed["audio"][2] == mine["audio"][2],
              "--memory stream differs from resident")
        os.unlink(out_s)
        print("h3-generate --memory stream: the resident clip, byte for byte")
rp = subprocess.run(base + ["--plan", "--memory", "stream"], capture_output=True, timeout=120)
check(rp.returncode == 0 and b"memory: stream" in rp.stdout and b"host-pageable" in rp.stdout,
      "--plan --memory stream: exit %d: %s" % (rp.returncode, rp.stdout.decode() + rp.stderr.decode()))
rb = subprocess.run(base + ["--memory", "offload", "--output", out], capture_output=True, timeout=60)
check(rb.returncode == 2 and b"--memory 'offload'" in rb.stderr, "--memory offload: exit %d: %s" %
      (rb.returncode, rb.stderr.decode()))

# Ref2VA: --reference image:FILE reproduces e2e_ref2va_image_3steps (transformer_ref/, the model's
# reference_image_short_edge); kinds not yet supported and bad files are refused by name
ref_json = json.load(open(os.path.join(data, "goldens/tiny-h3/e2e_ref2va_image_3steps.json")))
rq = ref_json["request"]
ref_png = os.path.join(data, rq["references"][0]["file"])
ref_base = [exe, "--model", os.path.join(data, "models/tiny-h3"), "--compute", "cpu", "--prompt", rq["prompt"],
            "--seed", str(rq["seed"]), "--width", str(rq["width"]), "--height", str(rq["height"]),
            "--num-frames", str(rq["num_frames"]), "--steps", str(ref_json["forwards"]), "--quiet"]
out_r = os.path.join(tmp, "ref2va.safetensors")
rr = subprocess.run(ref_base + ["--reference", "image:" + ref_png, "--output", out_r], capture_output=True,
                    timeout=600)
check(rr.returncode == 0, "h3-generate --reference: exit %d: %s" % (rr.returncode, rr.stderr.decode()))
if rr.returncode == 0:
    mine = read_safetensors(out_r)
    gold = read_safetensors(os.path.join(data, "goldens/tiny-h3/e2e_ref2va_image_3steps.safetensors"))
    v, gv = mine["video"][2], gold["videos_uint8"][2]
    check(len(v) == len(gv), "ref2va video bytes %d vs golden %d" % (len(v), len(gv)))
    maxd = max((abs(a - b) for a, b in zip(v, gv)), default=99)
    check(maxd <= 1, "ref2va uint8 frames differ by up to %d" % maxd)
    a, ga = array.array("f", mine["audio"][2]), array.array("f", gold["audio"][2])
    rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, ga)) / (sum(y * y for y in ga) or 1.0))
    check(len(a) == len(ga) and rel <= 1e-3, "ref2va audio rel L2 %.3g (%d vs %d samples)" % (rel, len(a), len(ga)))
    print("h3-generate --reference image: uint8 max |diff| %d, audio rel L2 %.3g" % (maxd, rel))
    # transformer_ref/ split over two ranks, and streamed: the same clip within the golden's bounds
    for extra in (["--devices", "cpu:2"], ["--memory", "stream"]):
        out_x = os.path.join(tmp, "ref2va-x.safetensors")
        rx = subprocess.run(ref_base + extra + ["--reference", "image:" + ref_png, "--output", out_x],
                            capture_output=True, timeout=600)
        check(rx.returncode == 0, "--reference %s: exit %d: %s" % (extra, rx.returncode, rx.stderr.decode()))
        if rx.returncode == 0:
            x = read_safetensors(out_x)
            xd = max((abs(a - b) for a, b in zip(x["video"][2], gv)), default=99)
            xa = array.array("f", x["audio"][2])
            xrel = math.sqrt(sum((p - q) ** 2 for p, q in zip(xa, ga)) / (sum(q * q for q in ga) or 1.0))
            check(xd <= 1 and len(xa) == len(ga) and xrel <= 1e-3,
                  "--reference %s: uint8 max diff %d, audio rel L2 %.3g" % (extra, xd, xrel))
            os.unlink(out_x)
    os.unlink(out_r)
# --plan counts transformer_ref/ (loaded inside the generation, so in the arena line): the plan with the
# reference exceeds the FL2VA plan of the same image by at least the partition's weights
def plan_total(args):
    rp = subprocess.run(ref_base + ["--plan"] + args, capture_output=True, timeout=120)
    for line in rp.stdout.decode().splitlines():
        if line.startswith("total:"):
            return int(line.split("(")[1].split()[0])
    check(False, "--plan %s: exit %d: %s" % (args, rp.returncode, rp.stdout.decode() + rp.stderr.decode()))
    return 0


ref_weights = sum(os.path.getsize(os.path.join(data, "models/tiny-h3/transformer_ref", f))
                  for f in os.listdir(os.path.join(data, "models/tiny-h3/transformer_ref")) if f.endswith(".safetensors"))
t_fl2va, t_ref = plan_total(["--image", ref_png]), plan_total(["--reference", "image:" + ref_png])
check(t_ref - t_fl2va >= ref_weights * 0.9,
      "--plan: Ref2VA %d vs FL2VA %d bytes, want transformer_ref's %d more" % (t_ref, t_fl2va, ref_weights))
print("h3-generate --plan: the reference adds %d bytes (transformer_ref/ files: %d)" % (t_ref - t_fl2va, ref_weights))

# [image, audio clip]: --reference audio:FILE.wav reproduces e2e_ref2va_audio_3steps
aud_json = json.load(open(os.path.join(data, "goldens/tiny-h3/e2e_ref2va_audio_3steps.json")))
aud_refs = []
for ref in aud_json["request"]["references"]:
    aud_refs += ["--reference", "%s:%s" % (ref["kind"], os.path.join(data, ref["file"]))]
out_a = os.path.join(tmp, "ref2va-audio.safetensors")
ra = subprocess.run(ref_base + aud_refs + ["--output", out_a], capture_output=True, timeout=600)
check(ra.returncode == 0, "h3-generate --reference image --reference audio: exit %d: %s" %
      (ra.returncode, ra.stderr.decode()))
if ra.returncode == 0:
    mine = read_safetensors(out_a)
    gold = read_safetensors(os.path.join(data, "goldens/tiny-h3/e2e_ref2va_audio_3steps.safetensors"))
    v, gv = mine["video"][2], gold["videos_uint8"][2]
    maxd = max((abs(a - b) for a, b in zip(v, gv)), default=99) if len(v) == len(gv) else 99
    a, ga = array.array("f", mine["audio"][2]), array.array("f", gold["audio"][2])
    rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, ga)) / (sum(y * y for y in ga) or 1.0))
    check(maxd <= 1 and len(a) == len(ga) and rel <= 1e-3,
          "ref2va audio case: uint8 max diff %d, audio rel L2 %.3g" % (maxd, rel))
    print("h3-generate --reference image + audio: uint8 max |diff| %d, audio rel L2 %.3g" % (maxd, rel))
    os.unlink(out_a)
empty_wav = os.path.join(tmp, "empty.wav")  # stereo 16-bit PCM at 1600 Hz, a data chunk of 3 bytes
with open(empty_wav, "wb") as f:
    f.write(b"RIFF" + struct.pack("<I", 39) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 2, 1600, 6400, 4, 16) +
            b"data" + struct.pack("<I", 3) + b"\x01\x02\x03")
not_wav = os.path.join(tmp, "notes.wav")
with open(not_wav, "w") as f:
    f.write("not a wav\n")
for arg, want, code in [("video:" + ref_png, "not yet supported", 2),
                        ("audio:" + not_wav, "not a WAV file", 2),
                        ("audio:" + ref_png, "not a WAV file", 2),
                        ("audio:" + empty_wav, "holds no samples", 2),
                        ("picture:" + ref_png, "expected image:FILE", 2),
                        ("image:" + os.path.join(tmp, "missing.png"), "missing.png", 2)]:
    r = subprocess.run(ref_base + ["--reference", arg, "--output", out_r], capture_output=True, timeout=60)
    err = r.stderr.decode()
    check(r.returncode == code and want in err and "--reference" in err,
          "--reference %s: exit %d: %s" % (arg, r.returncode, err))
os.unlink(not_wav)
os.unlink(empty_wav)
# a reference with a keyframe: refused by the request check, naming both
r = subprocess.run(ref_base + ["--reference", "image:" + ref_png, "--image", ref_png, "--output", out_r],
                   capture_output=True, timeout=60)
check(r.returncode != 0 and b"references cannot be combined" in r.stderr,
      "--reference with --image: exit %d: %s" % (r.returncode, r.stderr.decode()))

# bad keyframes: refused before the model loads, naming the file
bad_text = os.path.join(tmp, "notes.png")
with open(bad_text, "w") as f:
    f.write("not an image\n")
fifo = os.path.join(tmp, "fifo.png")
os.mkfifo(fifo)
for flag, path, want in [("--image", os.path.join(tmp, "missing.png"), "missing.png"),
                         ("--image", bad_text, "cannot be decoded"),
                         ("--last-image", fifo, "not a regular file")]:
    r = subprocess.run(base + [flag, path, "--output", out], capture_output=True, timeout=60)
    err = r.stderr.decode()
    check(r.returncode == 2 and want in err and flag in err, "%s %s: exit %d: %s" % (flag, path, r.returncode, err))
os.unlink(fifo)
os.unlink(bad_text)
if os.path.exists(out):
    os.unlink(out)
os.rmdir(tmp)
print("test_h3_generate: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
