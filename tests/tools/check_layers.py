#!/usr/bin/env python3
"""The layering of h3core, checked on every include (docs/ARCHITECTURE.md).

h3core/ has one folder per layer; a file may include its own layer and the
layers before it, never one after it:

    base  <-  backend  <-  parallel  <-  model  <-  engine  (h3.h is engine's face)

and within that:
  - an include in angle brackets of a project folder or header
    (#include <engine/h3_x.h>, <h3.h>) is judged like a quoted one;
  - every include of an h3core header carries its folder ("model/h3_dit.h");
  - backend/*.{c,h} (the interface) include neither cpu/ nor cuda/, and the
    two backends do not include each other;
  - above backend, only the interface (backend/h3_*.h but not its _impl.h)
    and, outside model/, the public CUDA header backend/cuda/h3_backend_cuda.h
    are visible: model code runs on the op interface alone;
  - a *_impl.h header is private to its own folder;
  - h3.h includes base/ only; the element (gst-plugin/) includes, of the
    project's headers, only h3.h, media/'s (h3_image_file.h: keyframe
    files, the code it shares with tools/) and its own;
  - no two modules (a .c and its .h) include each other, directly or
    through others: a cycle means the two are one concern or need a third.

The CUDA kernels sit in the top-level kernels/ and belong to the backend
layer: a kernel file includes only kernels/ headers ("kernels/h3_tc.cuh"),
and of h3core only backend/cuda/ includes them, their launch headers
(kernels/h3_kernels*.h) alone; the .cuh device headers stay in kernels/.

Usage: check_layers.py SOURCE_ROOT. Prints each violation and exits 1 if any.
"""
import os
import re
import sys

LAYERS = ['base', 'backend', 'parallel', 'model', 'engine']
# The project's top folders: an angle include under one of them is the project's, not the system's.
PROJECT_FOLDERS = set(LAYERS) | {'h3core', 'media', 'gst-plugin', 'tools', 'tests', 'examples', 'kernels'}
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<([^>]+)>)', re.M)


def includes(path, names):
    """The project includes of a file: every quoted one, and an angle one
    (#include <engine/h3_x.h>, <h3.h>) that names a project folder or a
    project header (names: the project's header base names), so that the
    brackets are no way around the rules; <glib.h>, <gst/gst.h> are the system's."""
    with open(path, encoding='utf-8', errors='replace') as f:
        found = INCLUDE.findall(f.read())
    out = []
    for quoted, angle in found:
        if quoted:
            out.append(quoted)
        elif angle.split('/')[0] in PROJECT_FOLDERS or ('/' not in angle and angle in names):
            out.append(angle)
    return out


def layer_of(rel):
    """rel: a path relative to h3core/. The layer folder, or None (h3.h)."""
    top = rel.split('/')[0]
    return top if top in LAYERS else None


def module_of(rel):
    """A .c, its .h and the .h's private companions (_impl.h, _bench.h) are one module."""
    return re.sub(r'_(impl|bench)$', '', os.path.splitext(rel)[0])


def check_kernel_include(rel, inc, kernel_headers, errors):
    """An h3core file's include of kernels/...: only backend/cuda/, launch headers alone."""
    if inc not in kernel_headers:
        errors.append('%s includes %s: no such kernel header' % (rel, inc))
    elif not rel.startswith('backend/cuda/'):
        errors.append('%s includes %s: only backend/cuda/ launches the kernels' % (rel, inc))
    elif not inc.endswith('.h'):
        errors.append('%s includes %s: a .cuh header is the kernels\' own' % (rel, inc))


def check_kernel_file(rel, incs, headers, kernel_headers, errors):
    """rel: kernels/NAME. Its project includes are kernels/ headers, named with the folder."""
    for inc in incs:
        if inc in kernel_headers:
            continue
        base = os.path.basename(inc)
        if inc.startswith('kernels/'):
            errors.append('%s includes %s: no such kernel header' % (rel, inc))
        elif any(h.endswith('/' + base) for h in kernel_headers):
            errors.append('%s: #include "%s" must carry its folder' % (rel, inc))
        elif inc in headers or any(inc.startswith(l + '/') for l in LAYERS) or inc == 'h3.h':
            errors.append('%s includes %s: the kernels include only kernels/ headers' % (rel, inc))


def check_h3core_file(rel, incs, headers, kernel_headers, errors):
    own = layer_of(rel)
    for inc in incs:
        if inc.startswith('kernels/'):
            check_kernel_include(rel, inc, kernel_headers, errors)
            continue
        if inc == 'h3.h':
            if own != 'engine':
                errors.append('%s includes h3.h: only engine/ implements the public API' % rel)
            continue
        if inc not in headers:
            base = os.path.basename(inc)
            if any(h.endswith('/' + base) for h in headers | kernel_headers):
                errors.append('%s: #include "%s" must carry its folder' % (rel, inc))
            continue
        target = layer_of(inc)
        if rel == 'h3.h':
            if target != 'base':
                errors.append('h3.h includes %s: the public header may include base/ only' % inc)
            continue
        if LAYERS.index(target) > LAYERS.index(own):
            errors.append('%s (%s) includes %s (%s): a layer may not include a later one' %
                          (rel, own, inc, target))
            continue
        if inc.endswith('_impl.h') and os.path.dirname(inc) != os.path.dirname(rel) and \
                not rel.startswith(os.path.dirname(inc) + '/'):
            errors.append('%s includes %s: an _impl.h header is private to its folder' % (rel, inc))
        if target == 'backend':
            sub = inc.split('/')[1] if inc.count('/') >= 2 else None
            own_sub = rel.split('/')[1] if own == 'backend' and rel.count('/') >= 2 else None
            if own == 'backend':
                if own_sub is None and sub is not None:
                    errors.append('%s includes %s: the backend interface knows no backend' % (rel, inc))
                elif own_sub and sub and own_sub != sub:
                    errors.append('%s includes %s: the CPU and CUDA backends are independent' % (rel, inc))
            else:
                if inc.endswith('_impl.h'):
                    errors.append('%s includes %s: only backends see the implementation header' % (rel, inc))
                elif sub == 'cuda' and (own == 'model' or inc != 'backend/cuda/h3_backend_cuda.h'):
                    errors.append('%s includes %s: %s' % (rel, inc,
                                  'model code runs on the op interface alone' if own == 'model'
                                  else 'only backend/cuda/h3_backend_cuda.h is public'))
                elif sub == 'cpu':
                    errors.append('%s includes %s: the CPU backend is private' % (rel, inc))


def find_cycles(edges):
    """Elementary cycles' representatives: one per strongly connected component."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
    core = os.path.join(root, 'h3core')
    files = []
    for d, _, fs in os.walk(core):
        for f in fs:
            if f.endswith(('.c', '.h', '.cu', '.cuh')):
                files.append(os.path.relpath(os.path.join(d, f), core))
    headers = {f for f in files if f.endswith(('.h', '.cuh'))}
    # Every header of the project outside gst-plugin/ by its base name (tools/, tests/, examples/...).
    project = set()
    for d, _, fs in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel.split(os.sep)[0] in ('.git', 'gst-plugin') or rel.startswith('build'):
            continue
        project.update(f for f in fs if f.endswith(('.h', '.cuh')))
    plugin = os.path.join(root, 'gst-plugin')
    own = set(os.listdir(plugin)) if os.path.isdir(plugin) else set()
    names = project | {f for f in own if f.endswith('.h')}
    kdir = os.path.join(root, 'kernels')
    kernel_files = ['kernels/' + f for f in sorted(os.listdir(kdir)) if f.endswith(('.cu', '.cuh', '.h'))] \
        if os.path.isdir(kdir) else []
    kernel_headers = {f for f in kernel_files if f.endswith(('.h', '.cuh'))}
    errors = []
    edges = {}
    for rel in sorted(files):
        incs = includes(os.path.join(core, rel), names)
        if rel != 'h3.h' and layer_of(rel) is None:
            errors.append('%s: every h3core file lives in a layer folder (%s)' % (rel, ', '.join(LAYERS)))
            continue
        check_h3core_file(rel, incs, headers, kernel_headers, errors)
        for inc in incs:
            if (inc in headers or inc in kernel_headers) and module_of(inc) != module_of(rel):
                edges.setdefault(module_of(rel), set()).add(module_of(inc))
    for rel in kernel_files:
        incs = includes(os.path.join(root, rel), names)
        check_kernel_file(rel, incs, headers, kernel_headers, errors)
        for inc in incs:
            if inc in kernel_headers and module_of(inc) != module_of(rel):
                edges.setdefault(module_of(rel), set()).add(module_of(inc))
    for comp in find_cycles(edges):
        errors.append('include cycle between modules: %s' % ' <-> '.join(comp))
    media = os.path.join(root, 'media')
    media_headers = {f for f in os.listdir(media) if f.endswith('.h')} if os.path.isdir(media) else set()
    for f in sorted(own):
        if f.endswith(('.c', '.h')):
            for inc in includes(os.path.join(plugin, f), names):
                if inc == 'h3.h' or inc in media_headers or inc in own or inc == 'config.h':
                    continue
                if inc in headers or any(inc.startswith(l + '/') for l in LAYERS) or \
                        os.path.basename(inc) in project:
                    errors.append('gst-plugin/%s includes %s: the element uses h3.h and media/ alone' % (f, inc))
    for e in errors:
        print('layer violation: ' + e)
    checked = len(files) + len(kernel_files)
    print('%d passed, %d failed' % (checked - len({e.split(':')[0] for e in errors}), len(errors)))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
