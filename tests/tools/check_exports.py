#!/usr/bin/env python3
"""The plugin exports its GStreamer entry points and nothing else.

libgsth3.so contains h3core, media/ and the CUDA runtime statically; any of
their symbols in the dynamic table is an engine internal that another
library loaded into the process can call, or interpose on. GStreamer needs
gst_plugin_<name>_get_desc (GST_PLUGIN_DEFINE also defines _register, for
static linking); gst-plugin/gsth3.map names them, and the libraries are
compiled with hidden visibility (docs/ARCHITECTURE.md, the layers).
Usage: check_exports.py NM PLUGIN.
"""
import re
import subprocess
import sys

ENTRY = re.compile(r'^gst_plugin_\w+$')
GET_DESC = re.compile(r'^gst_plugin_\w+_get_desc$')


def main():
    nm, plugin = sys.argv[1], sys.argv[2]
    out = subprocess.run([nm, '-D', '--defined-only', plugin], check=True, capture_output=True,
                         text=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if len(line.split()) >= 2]
    extra = sorted(n for n in names if not ENTRY.match(n))
    for n in extra:
        print('%s exports %s: only the gst_plugin_* entry points may leave the plugin' % (plugin, n))
    entry = [n for n in names if GET_DESC.match(n)]
    if not entry:
        print('%s exports no gst_plugin_*_get_desc: GStreamer cannot load it' % plugin)
    failed = len(extra) + (0 if entry else 1)
    print('%d passed, %d failed (%d symbols exported)' % (len(names) - len(extra), failed, len(names)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
