#!/usr/bin/env python3
"""No public symbol of libh3core.a is defined twice, and every one the C
objects export is in the h3_ namespace.

A static library does not complain when two members define the same
function: the linker takes whichever member it pulls first, so one copy
silently never runs (this is how a second h3_capabilities_describe once hid
the first). Usage: check_symbols.py NM LIBRARY.
"""
import subprocess
import sys


def main():
    nm, lib = sys.argv[1], sys.argv[2]
    out = subprocess.run([nm, '-A', '-g', '--defined-only', lib], check=True, capture_output=True,
                         text=True).stdout
    where = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        member, kind, name = parts[0], parts[-2], parts[-1]
        if kind in 'VvWwU':  # weak and undefined symbols may repeat (inline C++ in the CUDA objects)
            continue
        member = member.rsplit(':', 1)[0].split(':')[-1] if ':' in member else member
        where.setdefault(name, []).append(member)
    failed = 0
    for name, members in sorted(where.items()):
        if len(members) > 1:
            print('duplicate symbol %s in %s' % (name, ', '.join(members)))
            failed += 1
        c_object = all(m.endswith('.c.o') for m in members)
        if c_object and not name.startswith('h3'):
            print('symbol %s (%s) is outside the h3_ namespace: make it static or name it h3_...' %
                  (name, members[0]))
            failed += 1
    print('%d passed, %d failed' % (len(where) - failed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
