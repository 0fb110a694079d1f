#!/usr/bin/env python3
"""The default-visible functions of libh3core.a are exactly the API.

h3core is compiled with hidden visibility and H3_API (base/h3_api.h) marks
the public functions with default visibility (docs/ARCHITECTURE.md, the
layers). This check holds the mark and the headers together: every
function the public headers declare carries H3_API, and the library's C
objects define default-visible exactly those (an internal function marked
H3_API would widen the API; one the headers declare but the library does
not define is a broken promise). Usage: check_api.py READELF LIBRARY HEADER...
"""
import re
import subprocess
import sys

# A declaration at the start of a line: [H3_API] <type> [*]h3_name(
DECLARATION = re.compile(r'^(H3_API\s+)?(?:const\s+)?\w+\s*\*?\s*(h3_\w+)\s*\(', re.M)
MEMBER = re.compile(r'^File: .*[\[(](.+)[\])]$')


def declared(headers):
    marked, unmarked = set(), []
    for path in headers:
        with open(path, encoding='utf-8') as f:
            for mark, name in DECLARATION.findall(f.read()):
                if mark:
                    marked.add(name)
                else:
                    unmarked.append((path, name))
    return marked, unmarked


def default_visible(readelf, lib):
    """Functions and data the C objects define with default visibility, h3_ names only
    (sanitizer builds add instrumentation symbols of their own)."""
    out = subprocess.run([readelf, '-sW', lib], check=True, capture_output=True, text=True).stdout
    found, member = {}, None
    for line in out.splitlines():
        m = MEMBER.match(line.strip())
        if m:
            member = m.group(1)
            continue
        parts = line.split()
        if len(parts) < 8 or not parts[0].endswith(':') or not member or not member.endswith('.c.o'):
            continue
        bind, vis, ndx, name = parts[4], parts[5], parts[6], parts[7]
        if bind in ('GLOBAL', 'WEAK') and vis == 'DEFAULT' and ndx != 'UND' and name.startswith('h3_'):
            found[name] = member
    return found


def main():
    readelf, lib, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
    marked, unmarked = declared(headers)
    visible = default_visible(readelf, lib)
    errors, wrong = [], set()
    for path, name in unmarked:
        errors.append('%s declares %s without H3_API: mark it, or move it out of the public header' %
                      (path, name))
        wrong.add(name)
    for name in sorted(set(visible) - marked):
        errors.append('%s (%s) is default-visible but not declared H3_API in %s: internal functions '
                      'stay hidden' % (name, visible[name], ', '.join(headers)))
        wrong.add(name)
    for name in sorted(marked - set(visible)):
        errors.append('%s is declared H3_API but %s does not define it' % (name, lib))
        wrong.add(name)
    for e in errors:
        print('api: ' + e)
    names = marked | set(visible) | {name for _, name in unmarked}
    print('%d passed, %d failed' % (len(names - wrong), len(errors)))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
