#!/usr/bin/python3
"""Several clips in one process with one model load (PyGObject).

The pipeline is built once; for each prompt it goes back to NULL (filesink
only takes a new file name there), the h3videosrc properties and the file
name change, and it plays to EOS. h3videosrc keeps its loaded engine across
state changes while model-location, adapter-location, compute and devices
stay the same, so only the first clip loads the model.

    ./multi_prompt.py --width 256 --height 160 --frames 22 \
        "a red fox in snow" "waves on a beach at dusk"

Needs python3-gi and gir1.2-gstreamer-1.0 (Debian).
"""
import argparse
import os
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402


def play_to_eos(pipeline):
    """Plays to EOS; returns (ok, number of model loads seen)."""
    bus = pipeline.get_bus()
    loads = 0
    if pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
        return False, loads
    while True:
        msg = bus.timed_pop_filtered(
            Gst.CLOCK_TIME_NONE,
            Gst.MessageType.EOS | Gst.MessageType.ERROR | Gst.MessageType.PROGRESS)
        if msg.type == Gst.MessageType.EOS:
            return True, loads
        if msg.type == Gst.MessageType.ERROR:
            err, dbg = msg.parse_error()
            print(f"error: {err.message}\n({dbg})", file=sys.stderr)
            return False, loads
        ptype, code, text = msg.parse_progress()
        if code == "load" and ptype == Gst.ProgressType.START:
            loads += 1
        print(f"  [{code}] {text}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--height", type=int, default=160)
    ap.add_argument("--frames", type=int, default=22)
    ap.add_argument("--steps", type=int, default=0, help="0 = the model's default")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--model", help="MiniMax-H3 directory (default: the embedded tiny model)")
    ap.add_argument("--outdir", default=".")
    args = ap.parse_args()

    Gst.init(None)
    pipeline = Gst.parse_launch(
        "h3videosrc name=src ! queue ! matroskamux name=mux ! filesink name=sink "
        "src.audio ! queue ! mux.")
    src = pipeline.get_by_name("src")
    sink = pipeline.get_by_name("sink")
    if args.model:
        src.set_property("model-location", args.model)

    loads = 0
    ok = True
    for n, prompt in enumerate(args.prompts, start=1):
        location = os.path.join(args.outdir, f"clip-{n}.mkv")
        # h3videosrc properties change only in NULL or READY.
        pipeline.set_state(Gst.State.NULL)
        src.set_property("prompt", prompt)
        src.set_property("seed", args.seed + n - 1)
        src.set_property("width", args.width)
        src.set_property("height", args.height)
        src.set_property("num-frames", args.frames)
        src.set_property("steps", args.steps)
        sink.set_property("location", location)
        print(f"clip {n}: \"{prompt}\" -> {location} "
              f"({src.get_property('aligned-frames')} frames at {args.width}x{args.height})")
        ok, n_loads = play_to_eos(pipeline)
        loads += n_loads
        stats = src.get_property("stats")
        if stats is not None:
            print(f"  generated in {stats.get_double('total')[1]:.2f} s")
        if not ok:
            break
    pipeline.set_state(Gst.State.NULL)
    print(f"model loaded {loads} time(s) for {len(args.prompts)} clip(s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
