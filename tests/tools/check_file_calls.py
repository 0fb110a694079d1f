#!/usr/bin/env python3
"""No circle of calls between the C files of one folder (of h3core, or the element's).

check_layers.py sees includes; inside a folder every file includes the
folder's one _impl.h, so a circle of calls (a.c calls b.c, which calls a.c
back, directly or through others) is invisible to it. Such a circle is how
h3_engine_generate once re-entered itself through the memory plan's twin
(docs/ARCHITECTURE.md, "The twin and the engine's files"). A file calls
another when it names a function that the other defines without `static`
(comments and strings left out). Prints each circle and the calls that make
it, and exits 1 if any.

Usage: check_file_calls.py SOURCE_ROOT FOLDER... (folders under h3core/, or
gst-plugin for the element's files).
"""
import os
import re
import sys

from check_layers import find_cycles  # the checker beside this one

COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])\'')
# A definition at the start of a line: return type, name, arguments, then the
# body. The return type may be on the line before (GNU style, as in gst-plugin/).
DEFINITION = re.compile(r'^((?:[A-Za-z_][\w \t\*]*?\n)?(?:[A-Za-z_][\w \t\*]*?)?)\b(\w+)\s*'
                        r'\([^;{}]*\)\s*(?:G_GNUC_\w+\s*(?:\([^)]*\))?\s*)?\{', re.M)
IDENT = re.compile(r'\b[A-Za-z_]\w*\b')


def strip(text):
    return STRING.sub('""', COMMENT.sub(' ', text))


def scc(edges):
    """The strongly connected components of more than one node: check_layers'
    Tarjan, the one the include cycles use."""
    return find_cycles(edges)


def check_folder(root, folder):
    d = os.path.join(root, 'h3core', folder)
    if folder == 'gst-plugin':
        d = os.path.join(root, folder)
    files = sorted(f for f in os.listdir(d) if f.endswith('.c'))
    text = {}
    defined = {}
    for f in files:
        with open(os.path.join(d, f), encoding='utf-8', errors='replace') as fh:
            text[f] = strip(fh.read())
        for m in DEFINITION.finditer(text[f]):
            if 'static' not in m.group(1).split():
                defined[m.group(2)] = f
    edges, why = {}, {}
    for f in files:
        for name in set(IDENT.findall(text[f])):
            g = defined.get(name)
            if g and g != f:
                edges.setdefault(f, set()).add(g)
                why.setdefault((f, g), []).append(name)
    errors = []
    for comp in scc(edges):
        calls = ['%s -> %s (%s)' % (a, b, ', '.join(sorted(why[(a, b)])))
                 for a in comp for b in comp if (a, b) in why]
        errors.append('%s/: a circle of calls between %s: %s' % (folder, ', '.join(comp), '; '.join(calls)))
    return len(files), errors


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    checked, errors = 0, []
    for folder in sys.argv[2:]:
        n, e = check_folder(sys.argv[1], folder)
        checked += n
        errors += e
    for e in errors:
        print('call circle: ' + e)
    print('%d passed, %d failed' % (checked, len(errors)))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
