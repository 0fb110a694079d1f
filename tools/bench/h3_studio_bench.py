#!/usr/bin/env python3
"""h3-studio's overhead (issue 36): prompt to a playable MP4 through the API, against the same clip
through gst-launch-1.0 with the studio's own pipeline, in one run on one machine.

Both start cold (the engine loads inside the measured time): gst-launch-1.0 from launch to exit; the
studio from the POST to the downloaded MP4 (the page plays it from there), the server started
beforehand (it loads nothing until the first job). A second studio job shows the warm engine.
Release shapes on random weights (load-format=dummy with a dummy FastH3 adapter). Prints a Markdown table.

Usage (repository root, on the GPU machine; GST_PLUGIN_PATH finds libgsth3.so):
  tools/bench/h3_studio_bench.py --studio /tmp/g/bin/h3-studio --model tests/data/official \
      [--width 1280 --height 736 --frames 124 --backend vsa --precision bf16]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

# the studio's pipeline (tools/studio/h3_studio_jobs.c), with the clip's settings
PIPELINE = ("h3videosrc name=src {props} src.video ! queue ! videoconvert ! video/x-raw,format=I420 ! "
            "x264enc speed-preset=ultrafast ! h264parse ! mp4mux name=mux faststart=true ! filesink location={out} "
            "src.audio ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=0 ! audioconvert ! audioresample ! "
            "audio/x-raw,rate=48000 ! avenc_aac ! mux.")


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def get(url):
    with urllib.request.urlopen(url, timeout=600) as r:
        return r.read()


def studio_job(base, clip, out):
    t0 = time.time()
    v = post(base + "/v1/videos", clip)
    while v["status"] in ("queued", "in_progress"):
        time.sleep(0.05)
        v = json.loads(get(base + "/v1/videos/" + v["id"]))
    if v["status"] != "completed":
        raise RuntimeError("studio job failed: %s" % v)
    data = get(base + "/v1/videos/%s/content" % v["id"])
    dt = time.time() - t0
    with open(out, "wb") as f:
        f.write(data)
    return dt, len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--studio", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=736)
    ap.add_argument("--frames", type=int, default=124)
    ap.add_argument("--backend", default="vsa")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--engine", help="h3videosrc engine properties instead of the release's dummy weights on CUDA "
                    "(e.g. \"model-location=tests/data/models/tiny-h3 compute=cpu\" for a check on a CPU)")
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    engine = a.engine or "model-location=%s load-format=dummy dummy-adapter=%s precision=%s compute=cuda" % (
        a.model, "vsa" if a.backend == "vsa" else "dense", a.precision)
    clip = {"prompt": "a red fox in snow", "width": a.width, "height": a.height, "num_frames": a.frames,
            "backend": a.backend, "seed": 42, "steps": a.steps}
    tmp = tempfile.mkdtemp(prefix="h3-studio-bench-")

    props = "%s prompt=\"%s\" width=%d height=%d num-frames=%d backend=%s seed=42 steps=%d" % (
        engine, clip["prompt"], a.width, a.height, a.frames, a.backend, a.steps)
    launch = PIPELINE.format(props=props, out=os.path.join(tmp, "launch.mp4"))
    t0 = time.time()
    r = subprocess.run(["sh", "-c", "gst-launch-1.0 -e " + launch], capture_output=True, text=True)
    t_launch = time.time() - t0
    if r.returncode != 0:
        sys.exit("gst-launch-1.0 failed: " + r.stdout[-2000:] + r.stderr[-2000:])

    proc = subprocess.Popen([a.studio, "--port", "0", "--data", os.path.join(tmp, "videos"), "--element", engine],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on (http://[^ ]+?)/? ", line)
    if not m:
        proc.kill()
        sys.exit("h3-studio did not start: " + line)
    try:
        t_cold, n_cold = studio_job(m.group(1), clip, os.path.join(tmp, "studio1.mp4"))
        t_warm, n_warm = studio_job(m.group(1), clip, os.path.join(tmp, "studio2.mp4"))
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    print("| path | %dx%dx%d %s %s | seconds | vs gst-launch-1.0 |" % (a.width, a.height, a.frames, a.backend,
                                                                    a.precision))
    print("|---|---|---:|---:|")
    print("| gst-launch-1.0, studio's pipeline | launch to exit, cold | %.2f | 1.00 |" % t_launch)
    print("| h3-studio API | POST to downloaded MP4, cold (%d bytes) | %.2f | %.2f |" % (n_cold, t_cold,
                                                                                   t_cold / t_launch))
    print("| h3-studio API | POST to downloaded MP4, engine warm (%d bytes) | %.2f | %.2f |" % (n_warm, t_warm,
                                                                                          t_warm / t_launch))


if __name__ == "__main__":
    main()
