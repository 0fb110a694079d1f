#!/usr/bin/env python3
"""The project's static checks fail on the faults they exist for.

Each checker runs on a small input made here, in a temporary folder: once
clean (it must exit 0) and once with one planted fault (it must exit
non-zero and name the fault):
  - check_layers.py on a fake source tree: a base/ file that includes an
    engine/ header in angle brackets, and the element including a model/
    header the same way;
  - check_symbols.py on an ar archive of two tiny objects compiled here: a
    function defined weak in one and strong in the other;
  - check_exports.py on a tiny shared object that exports a function
    besides gst_plugin_<name>_get_desc;
  - check_api.py on a fake public header and an archive compiled hidden:
    a declaration without H3_API, and an internal function left visible.
Usage: test_checkers.py CHECK_LAYERS CHECK_SYMBOLS CHECK_EXPORTS CHECK_API NM AR READELF CC [CC ARGS...]
"""
import os
import subprocess
import sys
import tempfile

passed = failed = 0


def expect(what, ok):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print('FAIL: ' + what)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
    return path


def checked(name, cmd, want_fail, needle=None):
    rc, out = run(cmd)
    if want_fail:
        expect('%s exits non-zero on its planted fault (rc %d):\n%s' % (name, rc, out), rc != 0)
        expect('%s names the fault (%r):\n%s' % (name, needle, out), needle in out)
    else:
        expect('%s passes its clean input (rc %d):\n%s' % (name, rc, out), rc == 0)


def layers(check, tmp):
    root = os.path.join(tmp, 'tree')
    write(root, 'h3core/h3.h', '#include "base/h3_a.h"\n')
    write(root, 'h3core/base/h3_a.h', '#include <stddef.h>\n')
    write(root, 'h3core/base/h3_a.c', '#include <string.h>\n#include <base/h3_a.h>\n')
    write(root, 'h3core/engine/h3_e.h', '#include <base/h3_a.h>\n')
    write(root, 'h3core/engine/h3_e.c', '#include "engine/h3_e.h"\n#include <h3.h>\n')
    write(root, 'h3core/model/h3_m.h', '#include <base/h3_a.h>\n')
    write(root, 'gst-plugin/gsth3x.c', '#include <gst/gst.h>\n#include <h3.h>\n')
    checked('check_layers', [sys.executable, check, root], False)
    base_c = os.path.join(root, 'h3core/base/h3_a.c')
    with open(base_c, 'a') as f:
        f.write('#include <engine/h3_e.h>\n')
    checked('check_layers', [sys.executable, check, root], True,
            'base/h3_a.c (base) includes engine/h3_e.h (engine)')
    write(root, 'h3core/base/h3_a.c', '#include <base/h3_a.h>\n')
    with open(os.path.join(root, 'gst-plugin/gsth3x.c'), 'a') as f:
        f.write('#include <model/h3_m.h>\n')
    checked('check_layers', [sys.executable, check, root], True, 'gst-plugin/gsth3x.c includes model/h3_m.h')


def archive(ar, cc, tmp, name, sources):
    objs = []
    for i, text in enumerate(sources):
        src = write(tmp, '%s_%d.c' % (name, i), text)
        obj = src + '.o'  # the library's members are named *.c.o, as meson names them
        rc, out = run(cc + ['-c', '-fPIC', src, '-o', obj])
        if rc != 0:
            raise SystemExit('cannot compile %s: %s' % (src, out))
        objs.append(obj)
    lib = os.path.join(tmp, 'lib%s.a' % name)
    rc, out = run([ar, 'rcs', lib] + objs)
    if rc != 0:
        raise SystemExit('cannot archive %s: %s' % (lib, out))
    return lib


def symbols(check, nm, ar, cc, tmp):
    strong = 'int h3_pick(void) { return 1; }\n'
    weak = '__attribute__((weak)) int h3_pick(void) { return 2; }\n'
    other = 'int h3_other(void) { return 3; }\n'
    clean = archive(ar, cc, tmp, 'clean', [strong, other])
    checked('check_symbols', [sys.executable, check, nm, clean], False)
    faulty = archive(ar, cc, tmp, 'weak', [weak, strong])
    checked('check_symbols', [sys.executable, check, nm, faulty], True,
            'weak symbol h3_pick in weak_0.c.o is also defined strongly in weak_1.c.o')


def exports(check, nm, cc, tmp):
    entry = ('__attribute__((visibility("default"))) const void *gst_plugin_x_get_desc(void);\n'
             'const void *gst_plugin_x_get_desc(void) { return 0; }\n')
    internal = 'int h3_internal(void);\nint h3_internal(void) { return 4; }\n'
    src = write(tmp, 'plugin.c', entry + internal)
    for flags, want_fail in ((['-fvisibility=hidden'], False), ([], True)):
        so = os.path.join(tmp, 'libplugin%d.so' % want_fail)
        rc, out = run(cc + ['-shared', '-fPIC'] + flags + [src, '-o', so])
        if rc != 0:
            raise SystemExit('cannot link %s: %s' % (so, out))
        checked('check_exports', [sys.executable, check, nm, so], want_fail, 'exports h3_internal')


def api(check, readelf, ar, cc, tmp):
    header = write(tmp, 'api/h3.h', '#define H3_API __attribute__((visibility("default")))\n'
                   'H3_API int h3_pub(void);\n')
    pub = '#include "%s"\nint h3_pub(void) { return 5; }\n' % header
    internal = 'int h3_internal(void);\nint h3_internal(void) { return 6; }\n'
    hidden = cc + ['-fvisibility=hidden']
    clean = archive(ar, hidden, tmp, 'api', [pub, internal])
    checked('check_api', [sys.executable, check, readelf, clean, header], False)
    leaky = archive(ar, hidden, tmp, 'leaky', [pub, '__attribute__((visibility("default"))) ' + internal])
    checked('check_api', [sys.executable, check, readelf, leaky, header], True,
            'h3_internal (leaky_1.c.o) is default-visible but not declared H3_API')
    with open(header, 'a') as f:
        f.write('int h3_plain(void);\n')
    checked('check_api', [sys.executable, check, readelf, clean, header], True,
            'declares h3_plain without H3_API')


def main():
    check_layers, check_symbols, check_exports, check_api, nm, ar, readelf = sys.argv[1:8]
    cc = sys.argv[8:]
    with tempfile.TemporaryDirectory() as tmp:
        layers(check_layers, tmp)
        symbols(check_symbols, nm, ar, cc, tmp)
        exports(check_exports, nm, cc, tmp)
        api(check_api, readelf, ar, cc, tmp)
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
