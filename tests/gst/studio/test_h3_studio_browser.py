#!/usr/bin/env python3
"""h3-studio in a real browser (issue 36): headless Chromium driven by
Selenium submits a prompt in the page, waits for the job, checks that the
page's <video> plays (currentTime advances, videoWidth as asked) and that
the MP4 the page's download link saves is whole (ffprobe: the frames and an
audio stream). Writes a screenshot of the page (argument 3, optional).
Exit 77 (skipped) without chromium, chromedriver or python3-selenium.
usage: test_h3_studio_browser.py H3_STUDIO_EXE TEST_DATA_DIR [SCREENSHOT.png]"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h3_studio_server import Studio  # noqa: E402

exe, data = sys.argv[1], sys.argv[2]
shot = sys.argv[3] if len(sys.argv) > 3 else None
chromium = shutil.which("chromium")
driver_exe = shutil.which("chromedriver") or "/usr/bin/chromedriver"
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    print("skipped: python3-selenium is not installed (tools/install-deps-debian.sh)")
    sys.exit(77)
if not chromium or not os.path.exists(driver_exe):
    print("skipped: chromium or chromedriver is not installed (tools/install-deps-debian.sh)")
    sys.exit(77)

passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", msg, file=sys.stderr)


def until(what, fn, timeout=240):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    raise RuntimeError("timed out waiting for " + what)


downloads = tempfile.mkdtemp(prefix="h3-studio-downloads-")
profile = tempfile.mkdtemp(prefix="h3-studio-chromium-")
opts = webdriver.ChromeOptions()
opts.binary_location = chromium
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--autoplay-policy=no-user-gesture-required", "--window-size=1200,900", "--user-data-dir=" + profile]:
    opts.add_argument(a)
opts.add_experimental_option("prefs", {"download.default_directory": downloads, "download.prompt_for_download": False})
s = Studio(exe)
browser = None
try:
    # the sanitizer build preloads ASan for h3-studio: not for the browser
    browser_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    browser = webdriver.Chrome(service=Service(driver_exe, env=browser_env), options=opts)
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads})
    browser.get(s.url + "/")
    check("h3-studio" in browser.title, "title: %s" % browser.title)
    prompt = browser.find_element(By.ID, "prompt")
    prompt.clear()
    prompt.send_keys("a robot dancing in the rain")
    for field, value in [("width", "64"), ("height", "32"), ("num_frames", "22"), ("steps", "2")]:
        e = browser.find_element(By.ID, field)
        e.clear()
        e.send_keys(value)
    browser.find_element(By.ID, "submit").click()
    video = until("the page's <video>", lambda: browser.find_elements(By.CSS_SELECTOR, "video.player"))[0]
    until("metadata", lambda: browser.execute_script("return arguments[0].readyState >= 1", video), 60)
    width = browser.execute_script("return arguments[0].videoWidth", video)
    height = browser.execute_script("return arguments[0].videoHeight", video)
    check(width == 64 and height == 32, "videoWidth x videoHeight %s x %s" % (width, height))
    t0 = browser.execute_script("return arguments[0].currentTime", video)
    advanced = until("currentTime to advance", lambda: browser.execute_script(
        "return arguments[0].currentTime > %f ? arguments[0].currentTime : 0" % (t0 + 0.1), video) or
        browser.execute_script("return arguments[0].played.length > 0 && arguments[0].played.end(0) > 0.2", video), 60)
    err = browser.execute_script("return arguments[0].error && arguments[0].error.message", video)
    check(advanced and not err, "the video plays: currentTime from %s, error %s" % (t0, err))
    if shot:
        browser.save_screenshot(shot)
    browser.find_element(By.CSS_SELECTOR, "a.download").click()
    path = until("the download", lambda: [os.path.join(downloads, f) for f in os.listdir(downloads)
                                          if f.endswith(".mp4")], 60)[0]
    until("the download to finish", lambda: not [f for f in os.listdir(downloads) if f.endswith(".crdownload")], 60)
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                        "stream=codec_type,nb_read_frames,width", "-of", "json", path], capture_output=True, text=True)
    streams = {x["codec_type"]: x for x in json.loads(r.stdout or "{}").get("streams", [])}
    check(r.returncode == 0 and "video" in streams and int(streams["video"]["nb_read_frames"]) == 22 and
          streams["video"]["width"] == 64 and "audio" in streams, "the downloaded MP4: %s %s" % (streams, r.stderr))
    print("browser: <video> %sx%s plays; downloaded %s (%d bytes)" % (width, height, os.path.basename(path),
                                                                       os.path.getsize(path)))
finally:
    if browser:
        browser.quit()
    s.stop()
    shutil.rmtree(downloads, ignore_errors=True)
    shutil.rmtree(profile, ignore_errors=True)
print("test_h3_studio_browser: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
