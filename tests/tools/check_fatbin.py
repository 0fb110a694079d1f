#!/usr/bin/env python3
"""The CUDA kernels' fat binaries hold the images the build says they hold.

Reads the archive of the kernels (kernels/libh3kernels.a): each member's
.nv_fatbin section, the fat binary nvcc embeds, lists its images (SASS
`sm_NN`, with `a` or `f` for the architecture- and family-specific
variants, and PTX `compute_NN`), the listing cuobjdump --list-elf and
--list-ptx give (this reader stands in for cuobjdump, which a toolkit of
nvcc alone does not install). It fails unless
  - every portable member (all but *_sm90.o) holds exactly the images
    TARGETS names (the build's list, kernels/meson.build: what
    `capabilities` prints), and the Hopper members (*_sm90.o: wgmma)
    exactly sm_90a, the one architecture with those instructions;
  - TARGETS itself holds SASS for sm_80, sm_90a, sm_100 and sm_120 and PTX
    of the newest architecture NVCC lists (nvcc --list-gpu-arch), so a
    Blackwell GPU runs without compiling at its first launch and a later
    one can.
Usage: check_fatbin.py NVCC ARCHIVE TARGETS   (TARGETS: "sm_80,sm_90a,...,compute_121")
"""
import re
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000  # the `a` and `f` of sm_90a, sm_100f
REQUIRED_SASS = ['sm_80', 'sm_90a', 'sm_100', 'sm_120']


def archive_members(data):
    """(name, bytes) of each member of an ar archive (GNU long names)."""
    if not data.startswith(b'!<arch>\n'):
        raise ValueError('not an ar archive')
    at, names = 8, b''
    while at + 60 <= len(data):
        head = data[at:at + 60]
        name, size = head[:16].decode().strip(), int(head[48:58].decode().strip())
        body = data[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)
        if name == '//':
            names = body
        elif name in ('/', '/SYM64/'):
            continue
        else:
            if name.startswith('/') and name[1:].isdigit():
                start = int(name[1:])
                name = names[start:names.index(b'\n', start)].decode()
            yield name.rstrip('/'), body


def section(elf, wanted):
    """The bytes of ELF64 little-endian section `wanted`, or None."""
    if elf[:4] != b'\x7fELF' or elf[4] != 2 or elf[5] != 1:
        raise ValueError('not a little-endian ELF64 object')
    shoff, = struct.unpack_from('<Q', elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', elf, 0x3A)

    def header(i):
        name, _, _, _, off, size = struct.unpack_from('<IIQQQQ', elf, shoff + i * shentsize)
        return name, off, size

    _, stroff, _ = header(shstrndx)
    for i in range(shnum):
        name, off, size = header(i)
        end = elf.index(b'\0', stroff + name)
        if elf[stroff + name:end].decode() == wanted:
            return elf[off:off + size]
    return None


def fatbin_images(blob):
    """The image names of one or more fat binaries laid end to end."""
    images, at = [], 0
    while at + 16 <= len(blob):
        magic, _, header_size, size = struct.unpack_from('<IHHQ', blob, at)
        if magic != FATBIN_MAGIC:
            break
        entry, end = at + header_size, at + header_size + size
        while entry < end:
            kind, _, entry_header, padded = struct.unpack_from('<HHIQ', blob, entry)
            arch, = struct.unpack_from('<I', blob, entry + 28)
            flags, = struct.unpack_from('<Q', blob, entry + 40)
            suffix = 'a' if flags & FLAG_ARCH_SPECIFIC else 'f' if flags & FLAG_FAMILY else ''
            if kind == KIND_ELF:
                images.append('sm_%d%s' % (arch, suffix))
            elif kind == KIND_PTX:
                images.append('compute_%d%s' % (arch, suffix))
            else:
                images.append('kind%d_%d' % (kind, arch))
            entry += entry_header + padded
        at = (end + 7) & ~7  # fat binaries in one section start 8-aligned
    return images


def newest_arch(nvcc):
    out = subprocess.run([nvcc, '--list-gpu-arch'], capture_output=True, text=True, check=True).stdout
    return max(int(m) for m in re.findall(r'^compute_(\d+)', out, re.M))


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-1])
        return 2
    nvcc, archive, targets = sys.argv[1], sys.argv[2], sys.argv[3].split(',')
    errors = []
    newest = 'compute_%d' % newest_arch(nvcc)
    for need in REQUIRED_SASS + [newest]:
        if need not in targets:
            errors.append('the build\'s targets (%s) lack %s' % (','.join(targets), need))
    portable, hopper = sorted(targets), ['sm_90a']
    with open(archive, 'rb') as f:
        members = list(archive_members(f.read()))
    if not members:
        errors.append('%s: no members' % archive)
    for name, body in members:
        blob = section(body, '.nv_fatbin')
        images = fatbin_images(blob) if blob else []
        print('%s: %s' % (name, ' '.join(images) if images else '(no fat binary)'))
        want = hopper if name.endswith('_sm90.o') else portable
        if sorted(images) != want:
            missing = sorted(set(want) - set(images))
            extra = sorted(set(images) - set(want))
            errors.append('%s holds %s; wanted %s (missing: %s; not wanted: %s)' %
                          (name, ','.join(images) or 'nothing', ','.join(want), ','.join(missing) or 'none',
                           ','.join(extra) or 'none'))
    for e in errors:
        print('FAIL: ' + e)
    print('%d members, %d problems' % (len(members), len(errors)))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
