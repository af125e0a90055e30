/* engine/import/safetensors.h: reader of Hugging Face safetensors
 * checkpoints: one `*.safetensors` file, or a directory with
 * `model.safetensors` or `model.safetensors.index.json` plus its shards.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}),
 * then the data buffer; offsets are relative to the buffer. Everything is
 * untrusted: N is bounded (100 MB, as the reference implementation) and
 * checked against the file size, every tensor's byte range must equal its
 * dtype size, lie inside the buffer and not overlap another, names are unique
 * across shards and must agree with the index. Errors name the file and the
 * tensor. The reader keeps one fd per shard and never reads data by itself.
 */
#ifndef SPILL_IMPORT_SAFETENSORS_H
#define SPILL_IMPORT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/import/source.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_ST_HEADER_MAX 100000000ull
#define SPILL_ST_MAX_SHARDS 4096

/* Tensors of one parsed header (the fuzz target's unit). */
typedef struct spill_st_list {
  int n;
  spill_src_tensor *t; /* n entries, sorted by begin; names owned */
} spill_st_list;

/* Parses the header of a safetensors file whose first `len` bytes are in buf
 * (len must cover 8 + N) and whose total size is file_size. Tensor begins
 * are absolute file offsets; file index `file` is stored in each tensor.
 * src names the file in messages. On success *out owns memory
 * (spill_st_list_free). */
int spill_st_parse_header(const uint8_t *buf, size_t len, uint64_t file_size, int file,
                          const char *src, spill_st_list *out, spill_err *e);
void spill_st_list_free(spill_st_list *l); /* NULL/zeroed fine */

/* An open checkpoint (one or more shards). */
typedef struct spill_st_ckpt {
  int n_files;
  char **paths;  /* (n_files) */
  int *fds;      /* (n_files) O_RDONLY */
  int n_tensors;
  spill_src_tensor *t; /* sorted by name */
} spill_st_ckpt;

/* Opens `path`: a .safetensors file, or a directory holding
 * model.safetensors.index.json (shards) or model.safetensors. */
int spill_st_open(const char *path, spill_st_ckpt *c, spill_err *e);
void spill_st_close(spill_st_ckpt *c); /* NULL/zeroed fine */
/* Tensor by exact name, or NULL (binary search). */
const spill_src_tensor *spill_st_find(const spill_st_ckpt *c, const char *name);
/* Reads n bytes at byte offset off inside tensor t (off + n <= t->bytes). */
int spill_st_read(const spill_st_ckpt *c, const spill_src_tensor *t, uint64_t off, void *dst,
                  size_t n, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
