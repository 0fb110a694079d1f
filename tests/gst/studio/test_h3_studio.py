#!/usr/bin/env python3
"""h3-studio's API on the embedded tiny model (issue 36): every endpoint, the
MP4 it serves (ffprobe: H.264 + AAC, the frames asked for), a keyframe
upload, cancel and delete, and the bad requests: unknown fields, wrong
types, paths, sizes past the untrusted bounds, a deep JSON, an oversized
body, a bad upload, 100 submits at once against a queue of 8 (429 beyond
it, nothing leaks). usage: test_h3_studio.py H3_STUDIO_EXE TEST_DATA_DIR"""
import concurrent.futures
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h3_studio_server import Studio, multipart  # noqa: E402

exe, data = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", msg, file=sys.stderr)


def ffprobe(blob, path):
    with open(path, "wb") as f:
        f.write(blob)
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                        "stream=codec_type,codec_name,width,height,nb_read_frames", "-of", "json", path],
                       capture_output=True, text=True)
    return json.loads(r.stdout).get("streams", []) if r.returncode == 0 else []


CLIP = {"prompt": "a robot dancing", "size": "64x32", "num_frames": 22, "steps": 2, "seed": 7}
s = Studio(exe, "--max-queue", "8", "--max-upload", "1")
try:
    st, page, h = s.request("GET", "/")
    check(st == 200 and b"<form" in page and b"/v1/videos" in page, "the page: %d" % st)

    # create, retrieve, content
    st, v, _ = s.request("POST", "/v1/videos", dict(CLIP, model="minimax-h3"))
    check(st == 200 and v["object"] == "video" and v["status"] in ("queued", "in_progress") and
          v["id"].startswith("video_"), "create: %d %s" % (st, v))
    v = s.wait(v["id"])
    check(v["status"] == "completed" and v["progress"] == 100 and v["size"] == "64x32" and v["num_frames"] == 22 and
          v["seed"] == 7 and v["completed_at"], "completed: %s" % v)
    st, mp4, h = s.request("GET", "/v1/videos/%s/content" % v["id"])
    check(st == 200 and h["Content-Type"] == "video/mp4", "content: %d %s" % (st, h.get("Content-Type")))
    streams = ffprobe(mp4, os.path.join(s.data, "probe.mp4"))
    kinds = {x["codec_type"]: x for x in streams}
    check("video" in kinds and kinds["video"]["codec_name"] == "h264" and kinds["video"]["width"] == 64 and
          int(kinds["video"]["nb_read_frames"]) == 22, "ffprobe video: %s" % streams)
    check("audio" in kinds and kinds["audio"]["codec_name"] == "aac", "ffprobe audio: %s" % streams)
    os.unlink(os.path.join(s.data, "probe.mp4"))
    st, part, h = s.request("GET", "/v1/videos/%s/content" % v["id"], headers={"Range": "bytes=4-11"})
    check(st == 206 and part == mp4[4:12] and h["Content-Range"] == "bytes 4-11/%d" % len(mp4),
          "range: %d %s" % (st, h.get("Content-Range")))
    first = v["id"]

    # a keyframe upload (multipart, as the page and the SDK send it)
    png = open(os.path.join(data, "goldens/tiny-h3/e2e_fl2va_keyframe.png"), "rb").read()
    body, ctype = multipart({"prompt": "a robot dancing", "size": "64x32", "num_frames": "22", "steps": "2"},
                            {"input_reference": ("first.png", "image/png", png)})
    st, v, _ = s.request("POST", "/v1/videos", body, {"Content-Type": ctype})
    check(st == 200 and v["keyframe"] is True, "multipart create: %d %s" % (st, v))
    if st == 200:
        check(s.wait(v["id"])["status"] == "completed", "keyframe clip completed")

    # list: newest first, limit, after, order
    st, lst, _ = s.request("GET", "/v1/videos")
    ids = [x["id"] for x in lst["data"]]
    check(st == 200 and lst["object"] == "list" and len(ids) == 2 and ids[1] == first and not lst["has_more"],
          "list: %s" % lst)
    st, one, _ = s.request("GET", "/v1/videos?limit=1")
    check(one["data"][0]["id"] == ids[0] and one["has_more"] and one["last_id"] == ids[0], "limit=1: %s" % one)
    st, rest, _ = s.request("GET", "/v1/videos?limit=1&after=" + ids[0])
    check([x["id"] for x in rest["data"]] == [ids[1]] and not rest["has_more"], "after: %s" % rest)
    st, asc, _ = s.request("GET", "/v1/videos?order=asc")
    check([x["id"] for x in asc["data"]] == ids[::-1], "order=asc")
    st, e, _ = s.request("GET", "/v1/videos?limit=1000")
    check(st == 400 and e["error"]["param"] == "limit", "limit=1000: %d" % st)

    # bad requests: a JSON error with the status the peers' clients expect
    bad = [
        (dict(CLIP, colour="red"), 400, "colour", "unknown field 'colour'"),
        (dict(CLIP, seed="7"), 400, "seed", "expected a number"),
        (dict(CLIP, prompt=7), 400, "prompt", "expected a string"),
        (dict(CLIP, steps=2.5), 400, "steps", "steps"),
        (dict(CLIP, seed=-1), 400, "seed", "seed"),
        (dict(CLIP, backend="dense"), 400, "backend", "fa or vsa"),
        (dict(CLIP, model="sora-2"), 400, "model", "not served here"),
        (dict(CLIP, **{"model-location": "/etc"}), 400, "model-location", "unknown field"),
        (dict(CLIP, image_location="/etc/passwd"), 400, "image_location", "unknown field"),
        (dict(CLIP, size="4096x1024"), 400, None, "untrusted"),
        (dict(CLIP, steps=1000), 400, None, "untrusted"),
        (dict(CLIP, size="64x32", width=64), 400, "width", "not both"),
        (dict(CLIP, seconds="60"), 400, "seconds", "seconds"),
        ({"size": "64x32"}, 400, "prompt", "prompt is required"),
        ([CLIP], 400, None, "JSON object"),
    ]
    for body, want, param, text in bad:
        st, e, _ = s.request("POST", "/v1/videos", body)
        check(st == want and e["error"]["param"] == param and text in e["error"]["message"] and
              e["error"]["type"] == "invalid_request_error", "%s: %d %s" % (body, st, e))
    for raw, what in [(b"{", "truncated JSON"), (b"[" * 100000 + b"]" * 100000, "100,000-deep JSON")]:
        st, e, _ = s.request("POST", "/v1/videos", raw, {"Content-Type": "application/json"})
        check(st == 400 and "error" in e, "%s: %d" % (what, st))
    st, e, _ = s.request("POST", "/v1/videos", b"prompt=x", {"Content-Type": "text/plain"})
    check(st == 415, "text/plain: %d" % st)
    st, e, _ = s.request("POST", "/v1/videos", b"x" * (2 << 20), {"Content-Type": "application/json"})
    check(st == 413 and "larger than" in e["error"]["message"], "2 MiB body: %d %s" % (st, e))
    body, ctype = multipart({"prompt": "x", "size": "64x32"}, {"input_reference": ("a.png", "image/png", b"not a png")})
    st, e, _ = s.request("POST", "/v1/videos", body, {"Content-Type": ctype})
    check(st == 400 and e["error"]["param"] == "input_reference", "bad upload: %d %s" % (st, e))
    body, ctype = multipart({"prompt": "x"}, {"script": ("a.sh", "text/x-sh", b"rm -rf /")})
    st, e, _ = s.request("POST", "/v1/videos", body, {"Content-Type": ctype})
    check(st == 400 and e["error"]["param"] == "script", "other upload: %d %s" % (st, e))
    body, ctype = multipart({"prompt": "x"}, {"input_reference": ("a.gif", "image/gif", b"GIF89a")})
    st, e, _ = s.request("POST", "/v1/videos", body, {"Content-Type": ctype})
    check(st == 415, "gif upload: %d %s" % (st, e))
    st, e, _ = s.request("GET", "/v1/videos/video_0000000000000000")
    check(st == 404 and e["error"]["type"] == "not_found_error", "unknown id: %d" % st)
    st, e, _ = s.request("PUT", "/v1/videos/" + first)
    check(st == 405, "PUT: %d" % st)

    # cancel and delete
    st, v, _ = s.request("POST", "/v1/videos", dict(CLIP, num_frames=124, steps=8))
    st, c, _ = s.request("POST", "/v1/videos/%s/cancel" % v["id"])
    c = s.wait(v["id"])
    check(c["status"] == "failed" and c["error"]["code"] == "cancelled", "cancel: %s" % c)
    st, e, _ = s.request("GET", "/v1/videos/%s/content" % v["id"])
    check(st == 409, "content of a cancelled video: %d" % st)
    for vid in [first, v["id"]]:
        st, d, _ = s.request("DELETE", "/v1/videos/" + vid)
        check(st == 200 and d == {"id": vid, "object": "video.deleted", "deleted": True}, "delete: %s" % d)
        st, _, _ = s.request("GET", "/v1/videos/" + vid)
        check(st == 404, "deleted video still there: %d" % st)
    check(not os.path.exists(os.path.join(s.data, first + ".mp4")), "the deleted MP4 is gone")

    # 100 submits at once: one runs, 8 wait, the rest are 429; nothing leaks
    rss0 = s.rss_kib()
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        # clips of a few seconds each: the flood is over before the first ends
        answers = list(pool.map(lambda i: s.request("POST", "/v1/videos", dict(CLIP, seed=i, num_frames=124, steps=8)),
                                range(100)))
    ok = [v for st, v, _ in answers if st == 200]
    busy = [v for st, v, _ in answers if st == 429]
    check(len(ok) + len(busy) == 100 and 8 <= len(ok) <= 10 and
          all(v["error"]["type"] == "rate_limit_error" for v in busy), "100 submits: %d ok, %d 429" % (len(ok), len(busy)))
    for v in ok:
        s.request("POST", "/v1/videos/%s/cancel" % v["id"])
    for v in ok:
        s.wait(v["id"])
        s.request("DELETE", "/v1/videos/" + v["id"])
    st, lst, _ = s.request("GET", "/v1/videos?limit=100")
    left = [x["id"] for x in lst["data"]]
    for vid in left:
        s.request("DELETE", "/v1/videos/" + vid)
    # a job deleted while it ran leaves its file until its pipeline stops
    for _ in range(300):
        files = os.listdir(s.data)
        if not files:
            break
        time.sleep(0.1)
    check(files == [], "files left in the data folder: %s" % files)
    rss1 = s.rss_kib()
    check(rss1 - rss0 < 64 * 1024, "RSS grew %d KiB over 100 submits" % (rss1 - rss0))
    print("h3-studio: %d accepted, %d refused with 429; RSS %+d KiB" % (len(ok), len(busy), rss1 - rss0))
finally:
    rc = s.stop()
check(rc == 0, "h3-studio exit %d" % rc)
print("test_h3_studio: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
