/* h3_file.h - opening the files of a model folder.
 *
 * Only regular files are read: a FIFO, a device or a directory put in place
 * of a weights or config file is refused before any read that could block
 * (a FIFO without a writer blocks open() forever). And a path a model file
 * names (a config's source_path, an index's shard) must stay inside the
 * model's folder once every symlink is resolved. */
#ifndef H3_FILE_H
#define H3_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens path for reading: open(O_RDONLY | O_NONBLOCK | O_CLOEXEC) (which
 * never blocks, a FIFO included), fstat, a non-regular file refused with
 * H3_ERR_IO "not a regular file", then O_NONBLOCK cleared so reads block as
 * usual. A missing file is H3_ERR_NOT_FOUND. *fd is the caller's to close. */
h3_status_code h3_file_open(const char *path, int *fd, uint64_t *size, h3_status *status);
/* Reads a whole regular file of at most max_bytes into a new NUL-terminated
 * buffer (g_free it). A larger file is H3_ERR_FORMAT naming the limit. */
h3_status_code h3_file_read(const char *path, size_t max_bytes, char **out, size_t *len, h3_status *status);
/* path, with every symlink resolved, is root or lies below it (root also
 * resolved): else H3_ERR_FORMAT naming both, `what` saying who named the
 * path ("vae/config.json \"source_path\""). A path that does not exist is
 * H3_ERR_NOT_FOUND. */
h3_status_code h3_path_check_inside(const char *root, const char *path, const char *what, h3_status *status);

/* A file a model file names by a path relative to root (a config's
 * source_safetensors_path): relative, no ".." part, and its folder inside
 * root with symlinks resolved (h3_path_check_inside). The file itself may
 * be a symlink: a Hugging Face cache snapshot links every file to blobs/
 * outside it, so a link as the last part is what a real model folder has. */
h3_status_code h3_path_check_file_name(const char *root, const char *rel, const char *what, h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
