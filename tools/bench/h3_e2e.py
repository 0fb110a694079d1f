#!/usr/bin/env python3
"""End to end at the release's size: prompt -> h3videosrc -> x264enc -> mp4mux -> a closed file.

Runs each case as a user would, through gst-launch-1.0 (the product path), on the
release's configs with random weights (load-format=dummy: the official weights cannot
be downloaded here), and reports per case:

  - the engine's stages from the element's h3videosrc/done message (load, text,
    denoise, decode-audio, decode-video; seconds) and its peak-bytes;
  - the first buffer (the `generate` progress COMPLETE message, which the element posts
    right before it pushes the first buffer) and EOS, in seconds from launch;
  - prompt to closed file (the process's whole wall time);
  - peak GPU memory in use (nvidia-smi, sampled every 100 ms) and the host's peak RSS;
  - the memory plan (h3-generate --plan) next to it, when given --generate;
  - whether the file is an MP4 (its ftyp box), its video track's frame count and its length
    (read from the file's own boxes; gst-discoverer-1.0's duration when given and it has decoders).

Usage (repository root, on the GPU machine; GST_PLUGIN_PATH must find libgsth3.so):
  tools/bench/h3_e2e.py --model tests/data/official --case fasth3-fa-1280 --case fasth3-vsa-1280 ...
  tools/bench/h3_e2e.py --list
Cases are named MODE-BACKEND-SIZE; see CASES below. Results: a Markdown table on stdout
(and --json FILE). Nothing here is timed by a unit test.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time

# name: (width, height, frames, backend, dummy adapter (None: the base model, 49 forwards))
CASES = {
    'fasth3-fa-1280': (1280, 736, 124, 'fa', 'dense'),
    'fasth3-vsa-1280': (1280, 736, 124, 'vsa', 'vsa'),
    'fasth3-fa-1344': (1344, 768, 124, 'fa', 'dense'),
    'fasth3-vsa-1344': (1344, 768, 124, 'vsa', 'vsa'),
    'base-fa-1280': (1280, 736, 124, 'fa', None),
    'fasth3-vsa-1344-15s': (1344, 768, 362, 'vsa', 'vsa'),
    'fasth3-fa-1344-15s': (1344, 768, 362, 'fa', 'dense'),
    'tiny': (64, 32, 22, 'fa', None),  # the tool itself, on the tiny model on a CPU
}

PROMPT = 'a red fox in snow'


class GpuSampler(threading.Thread):
    """Peak of nvidia-smi's memory.used (MiB) over the run, every 100 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_mib = 0
        self.stop = threading.Event()
        self.ok = True

    def run(self):
        while not self.stop.is_set():
            try:
                out = subprocess.run(['nvidia-smi', '--query-gpu=memory.used', '--format=csv,noheader,nounits'],
                                     capture_output=True, text=True, timeout=5).stdout
                for line in out.split():
                    self.peak_mib = max(self.peak_mib, int(line.split(',')[0]))
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.ok = False
                return
            self.stop.wait(0.1)


def structure_fields(text):
    """Fields of a GstStructure as gst-launch -m prints it: name=(type)value, ..."""
    fields = {}
    for m in re.finditer(r'([a-z][a-z0-9-]*)=\((\w+)\)("(?:[^"\\]|\\.)*"|[^,;]*)', text):
        key, typ, val = m.group(1), m.group(2), m.group(3).strip('"')
        if typ in ('double', 'float'):
            val = float(val)
        elif typ in ('int', 'uint', 'gint', 'guint', 'int64', 'uint64', 'guint64'):
            val = int(val)
        elif typ in ('boolean', 'gboolean'):
            val = val.lower() in ('true', '1')
        fields[key] = val
    return fields


def gst_pipeline(case, args, out_path):
    w, h, f, backend, adapter = CASES[case]
    src = ['h3videosrc', 'name=s', 'prompt=%s' % PROMPT, 'seed=42', 'width=%d' % w, 'height=%d' % h,
           'num-frames=%d' % f, 'backend=%s' % backend, 'model-location=%s' % args.model,
           'load-format=%s' % args.load_format, 'compute=%s' % args.compute]
    if adapter and args.load_format == 'dummy':
        src.append('dummy-adapter=%s' % adapter)
    src += args.set
    video = ['s.video', '!', 'queue', '!', 'videoconvert', '!', 'video/x-raw,format=I420', '!',
             'x264enc', 'speed-preset=%s' % args.x264_preset] + (['bitrate=%d' % args.x264_bitrate] if args.x264_bitrate else []) + [
             '!', 'mp4mux', 'name=m', '!',
             'filesink', 'location=%s' % out_path]
    # audioresample: a pass-through at the release's 32 kHz; the tiny model's 1.6 kHz is below any rate
    # lamemp3enc takes, so without it that pipeline does not link
    audio = ['s.audio', '!', 'queue', '!', 'audioconvert', '!', 'audioresample', '!', 'lamemp3enc', '!', 'm.']
    return ['gst-launch-1.0', '-e', '-m'] + src + video + audio


def run_case(case, args):
    out_path = os.path.join(args.workdir, case + '.mp4')
    if os.path.exists(out_path):
        os.remove(out_path)
    cmd = gst_pipeline(case, args, out_path)
    sampler = GpuSampler()
    sampler.start()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    first_buffer = eos = None
    done = {}
    tail = []
    for line in proc.stdout:
        now = time.monotonic() - t0
        tail = (tail + [line.rstrip()])[-40:]
        if 'type=(GstProgressType)complete' in line.replace(' ', '') and 'code=(string)generate' in line:
            first_buffer = first_buffer or now
        if 'h3videosrc/done' in line:
            done = structure_fields(line)
        if eos is None and re.search(r'Got EOS from element', line):
            eos = now
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (peak RSS)
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    sampler.stop.set()
    sampler.join()
    rss_mib = usage.ru_maxrss / 1024.0
    size = os.path.getsize(out_path) if os.path.exists(out_path) else 0
    mp4_ok = False
    if size > 8:
        with open(out_path, 'rb') as fh:
            mp4_ok = fh.read(8)[4:8] == b'ftyp'
    duration = None
    tracks = mp4_tracks(out_path) if mp4_ok else {}
    if mp4_ok and args.discoverer:
        d = subprocess.run([args.discoverer, '-v', out_path], capture_output=True, text=True).stdout
        m = re.search(r'Duration: (\d+):(\d+):([\d.]+)', d)
        if m:
            duration = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    if duration is None and 'vide' in tracks:  # no decoders for the discoverer: the video track's own length
        duration = tracks['vide'].get('seconds')
    row = {
        'case': case, 'rc': rc, 'wall': wall, 'first_buffer': first_buffer, 'eos': eos,
        'load': done.get('load'), 'text': done.get('text'), 'denoise': done.get('denoise'),
        'decode_audio': done.get('decode-audio'), 'decode_video': done.get('decode-video'),
        'steps': done.get('steps'), 'random_weights': done.get('random-weights'),
        'engine_peak_gib': (done.get('peak-bytes') or 0) / 2 ** 30,
        'gpu_peak_gib': sampler.peak_mib / 1024.0 if sampler.ok else None,
        'host_rss_gib': rss_mib / 1024.0, 'file_bytes': size, 'mp4': mp4_ok, 'duration': duration,
        'video_frames': tracks.get('vide', {}).get('samples'), 'audio_frames': tracks.get('soun', {}).get('samples'),
        'shape': '%dx%dx%d' % CASES[case][:3], 'result': done.get('result'),
        'label': ' '.join(args.set), 'memory': done.get('memory'),
    }
    if rc != 0 or not done:
        row['tail'] = tail
    return row


def mp4_boxes(data, start, end):
    """(type, payload start, payload end) of each box in data[start:end]."""
    while start + 8 <= end:
        size, kind = struct.unpack('>I4s', data[start:start + 8])
        head = 8
        if size == 1:
            size, head = struct.unpack('>Q', data[start + 8:start + 16])[0], 16
        elif size == 0:
            size = end - start
        if size < head or start + size > end:
            return
        yield kind.decode('latin-1'), start + head, start + size
        start += size


def mp4_tracks(path):
    """Per track handler ('vide', 'soun'): its sample count (stsz) and seconds (mdhd), read from the file
    itself, so the frame count is checked without any decoder on the machine."""
    with open(path, 'rb') as fh:
        data = fh.read()
    tracks = {}
    for kind, a, b in mp4_boxes(data, 0, len(data)):
        if kind != 'moov':
            continue
        for tkind, ta, tb in mp4_boxes(data, a, b):
            if tkind != 'trak':
                continue
            info = {}
            stack = [(ta, tb)]
            while stack:
                sa, sb = stack.pop()
                for k, x, y in mp4_boxes(data, sa, sb):
                    if k in ('mdia', 'minf', 'stbl'):
                        stack.append((x, y))
                    elif k == 'hdlr':
                        info['handler'] = data[x + 8:x + 12].decode('latin-1')
                    elif k == 'mdhd':
                        if data[x] == 1:
                            scale, dur = struct.unpack('>IQ', data[x + 20:x + 32])
                        else:
                            scale, dur = struct.unpack('>II', data[x + 12:x + 20])
                        info['seconds'] = dur / scale if scale else 0.0
                    elif k == 'stsz':
                        info['samples'] = struct.unpack('>I', data[x + 8:x + 12])[0]
            if 'handler' in info:
                tracks[info['handler']] = info
    return tracks


def generate_options(settings):
    """The element's settings of --set as h3-generate's options, so the plan is the run's."""
    out = []
    for kv in settings:
        key, val = kv.split('=', 1)
        if key == 'max-gpu-memory':  # bytes for the element, GiB for h3-generate
            val = '%.6f' % (int(val) / 2 ** 30)
        out += ['--' + key, val]
    return out


def plan_case(case, args):
    if not args.generate:
        return None
    w, h, f, backend, adapter = CASES[case]
    cmd = [args.generate, '--plan', '--model', args.model, '--load-format', args.load_format, '--compute', args.compute,
           '--width', str(w), '--height', str(h), '--num-frames', str(f), '--backend', backend,
           '--prompt', PROMPT]
    if adapter and args.load_format == 'dummy':
        cmd += ['--dummy-adapter', adapter]
    cmd += generate_options(args.set)
    p = subprocess.run(cmd, capture_output=True, text=True)
    text = p.stdout + p.stderr
    m = re.search(r'total:\s*([\d.]+)', text)
    return {'rc': p.returncode, 'total_gib': float(m.group(1)) if m else None, 'text': text}


def fmt(v, spec='%.2f'):
    return '-' if v is None else spec % v


def table(rows):
    head = ('| case | shape | steps | load | text | denoise | audio | video | first buffer | EOS | '
            'file closed | GPU peak (smi) | engine peak | plan | host RSS | mp4 |')
    lines = [head, '|' + '---|' * (head.count('|') - 1)]
    for r in rows:
        plan = r.get('plan') or {}
        lines.append('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            r['case'] + (' ' + r['label'] if r.get('label') else '') + (' (%s)' % r['memory'] if r.get('memory') else ''),
            r['shape'], r.get('steps') or '-', fmt(r['load']), fmt(r['text']), fmt(r['denoise']),
            fmt(r['decode_audio']), fmt(r['decode_video']), fmt(r['first_buffer']), fmt(r['eos']),
            fmt(r['wall']), fmt(r['gpu_peak_gib']), fmt(r['engine_peak_gib']), fmt(plan.get('total_gib')),
            fmt(r['host_rss_gib']), ('yes, %s s, %s frames' % (fmt(r['duration']), fmt(r.get('video_frames'), '%d')) if r['mp4'] else 'NO') + ('' if r['rc'] == 0 else ' (rc %d)' % r['rc'])))
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', default='tests/data/official')
    ap.add_argument('--case', action='append', default=[])
    ap.add_argument('--list', action='store_true')
    ap.add_argument('--workdir', default='/tmp')
    ap.add_argument('--generate', help='h3-generate, for the memory plan of each case')
    ap.add_argument('--discoverer', default=None, help='gst-discoverer-1.0, to count the frames of each file')
    ap.add_argument('--x264-preset', default='veryfast')
    ap.add_argument('--x264-bitrate', type=int, default=0, help='kbit/s (0: x264enc\'s default)')
    ap.add_argument('--compute', default='cuda')
    ap.add_argument('--load-format', default='dummy')
    ap.add_argument('--set', action='append', default=[], metavar='PROP=VALUE',
                    help='an h3videosrc property for every case (memory=stream, max-gpu-memory=BYTES, '
                         'precision=fp8), passed to h3-generate --plan as --PROP VALUE (max-gpu-memory in GiB)')
    ap.add_argument('--json')
    args = ap.parse_args()
    if args.list:
        for k, v in CASES.items():
            print('%-22s %dx%dx%d backend=%s adapter=%s' % ((k,) + v))
        return 0
    rows = []
    for case in args.case or ['fasth3-fa-1280', 'fasth3-vsa-1280']:
        if case not in CASES:
            print('unknown case %s (--list)' % case, file=sys.stderr)
            return 2
        plan = plan_case(case, args)
        row = run_case(case, args)
        row['plan'] = plan
        rows.append(row)
        print('%s: rc %d, %.1f s, %s' % (case, row['rc'], row['wall'], row.get('result')), file=sys.stderr)
        for line in row.get('tail', []):
            print('  ' + line, file=sys.stderr)
        sys.stderr.flush()
    print(table(rows))
    if args.json:
        with open(args.json, 'w') as fh:
            json.dump(rows, fh, indent=1, default=str)
    return 0 if all(r['rc'] == 0 and r['mp4'] for r in rows) else 1


if __name__ == '__main__':
    sys.exit(main())
