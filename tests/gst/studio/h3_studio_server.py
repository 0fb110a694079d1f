"""Starts h3-studio for a test on a free port of 127.0.0.1, on the embedded
tiny model on the CPU, and stops it (python3, stdlib only)."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


class Studio:
    def __init__(self, exe, *args):
        self.data = tempfile.mkdtemp(prefix="h3-studio-test-")
        self.proc = subprocess.Popen([exe, "--port", "0", "--data", self.data, "--element", "compute=cpu", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://[^ ]+?)/? ", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("h3-studio did not start: " + line + self.proc.stdout.read())
        self.url = m.group(1)

    def request(self, method, path, body=None, headers=None):
        """(status, parsed JSON or bytes, headers)."""
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            h.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw, status, rh = r.read(), r.status, r.headers
        except urllib.error.HTTPError as e:
            raw, status, rh = e.read(), e.code, e.headers
        if rh.get("Content-Type", "").startswith("application/json"):
            return status, json.loads(raw), rh
        return status, raw, rh

    def wait(self, vid, timeout=300):
        t0 = time.time()
        while time.time() - t0 < timeout:
            s, v, _ = self.request("GET", "/v1/videos/" + vid)
            if s != 200 or v["status"] in ("completed", "failed"):
                return v
            time.sleep(0.2)
        raise RuntimeError("video %s not done in %d s" % (vid, timeout))

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def multipart(fields, files):
    """(body, content type) of a multipart/form-data request."""
    boundary = "h3studio" + os.urandom(8).hex()
    out = b""
    for k, v in fields.items():
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, k, v)).encode()
    for k, (name, ctype, data) in files.items():
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\nContent-Type: %s\r\n\r\n"
                % (boundary, k, name, ctype)).encode() + data + b"\r\n"
    out += ("--%s--\r\n" % boundary).encode()
    return out, "multipart/form-data; boundary=" + boundary
