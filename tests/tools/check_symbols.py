#!/usr/bin/env python3
"""No public symbol of libh3core.a is defined twice, and every one the C
objects export is in the h3_ namespace.

A static library does not complain when two members define the same
function: the linker takes whichever member it pulls first, so one copy
silently never runs (this is how a second h3_capabilities_describe once hid
the first). A weak definition (nm type W or V) beside a strong one in
another member is the same fault in disguise: the strong one wins without a
word. Weak definitions alone may repeat (the inline C++ of the CUDA
objects, one copy kept). Every library given is read as one: a symbol
defined in two of them is a duplicate too. Usage: check_symbols.py NM LIBRARY...
"""
import subprocess
import sys

WEAK = 'VW'                 # defined weak: the linker keeps one copy, or the strong one
STRONG = 'TDBRGSCi'         # defined strong: text, data, bss, read-only, small data, common, ifunc
SKIP = 'vwUu'               # undefined weak, undefined, and GNU unique (one per process by design)


def main():
    nm, libs = sys.argv[1], sys.argv[2:]
    out = subprocess.run([nm, '-A', '-g', '--defined-only'] + libs, check=True, capture_output=True,
                         text=True).stdout
    strong, weak = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        member, kind, name = parts[0], parts[-2], parts[-1]
        if kind in SKIP:
            continue
        member = member.rsplit(':', 1)[0].split(':')[-1] if ':' in member else member
        (weak if kind in WEAK else strong).setdefault(name, []).append(member)
    failed = 0
    for name, members in sorted(strong.items()):
        if len(members) > 1:
            print('duplicate symbol %s in %s' % (name, ', '.join(members)))
            failed += 1
        if name in weak:
            print('weak symbol %s in %s is also defined strongly in %s: the strong one wins silently' %
                  (name, ', '.join(weak[name]), ', '.join(members)))
            failed += 1
        c_object = all(m.endswith('.c.o') for m in members)
        if c_object and not name.startswith('h3'):
            print('symbol %s (%s) is outside the h3_ namespace: make it static or name it h3_...' %
                  (name, members[0]))
            failed += 1
    checked = len(strong) + len(set(weak) - set(strong))
    print('%d passed, %d failed' % (checked - failed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
