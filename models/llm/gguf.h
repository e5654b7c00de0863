/* GGUF files (the format of llama.cpp's models): a reader that maps the file and checks every
 * count, offset and size before use, and a writer for the small models the tests make.
 *
 * A file is: magic "GGUF", version (2 or 3), tensor count, metadata count (uint64), the metadata
 * (key string, value type, value), the tensor infos (name, dims, type, offset into the data
 * section), padding to `general.alignment` (32 when absent), the data section. Strings are a
 * uint64 length and bytes (no NUL). Everything is little-endian.
 *
 * Errors are hcq statuses. A file that is truncated, inconsistent or hostile is INVALID_ARGUMENT
 * naming the file, the key or tensor, and what is wrong; a FIFO, device or folder is refused
 * without blocking (INVALID_ARGUMENT); a missing file is NOT_FOUND. A lookup of an absent key or
 * tensor is NOT_FOUND naming it; a value of another type is INVALID_ARGUMENT naming the key, the
 * type found and the type wanted.
 *
 * Threads: a gguf_file_t is read-only after gguf_open and may be read from any number of threads.
 */
#ifndef HCQ_LLM_GGUF_H
#define HCQ_LLM_GGUF_H

#include <hcq/hcq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types, as numbered in the file. */
// clang-format off
#define GGUF_VALUE_TYPES(X) \
  X(UINT8, 0, "uint8")      \
  X(INT8, 1, "int8")        \
  X(UINT16, 2, "uint16")    \
  X(INT16, 3, "int16")      \
  X(UINT32, 4, "uint32")    \
  X(INT32, 5, "int32")      \
  X(FLOAT32, 6, "float32")  \
  X(BOOL, 7, "bool")        \
  X(STRING, 8, "string")    \
  X(ARRAY, 9, "array")      \
  X(UINT64, 10, "uint64") X(INT64, 11, "int64") X(FLOAT64, 12, "float64")
// clang-format on
typedef enum gguf_value_type {
#define GGUF_VT_ENUM(name, value, text) GGUF_##name = value,
  GGUF_VALUE_TYPES(GGUF_VT_ENUM)
#undef GGUF_VT_ENUM
} gguf_value_type_t;
/* "uint32"; "type 77" style text for unknown ones */
const char *gguf_value_type_name(uint32_t type);

/* Every tensor type of ggml's numbering, with its block: elements per block and bytes per block
 * (ggml's type_traits; F32 is a block of 1 element of 4 bytes, Q4_K 256 elements in 144 bytes). The
 * reader sizes and places a tensor of any of them; which ones the kernels read is support.h's
 * question. Numbers 4, 5, 31-33 and 36-38 were ggml types once and are gone from GGUF files
 * (ggml_type_removed); any other number is not a ggml type. */
// clang-format off
#define GGML_TYPES(X)                                                                             \
  X(F32, 0, "F32", 1, 4)                                                                          \
  X(F16, 1, "F16", 1, 2)                                                                          \
  X(Q4_0, 2, "Q4_0", 32, 18)                                                                      \
  X(Q4_1, 3, "Q4_1", 32, 20)                                                                      \
  X(Q5_0, 6, "Q5_0", 32, 22)                                                                      \
  X(Q5_1, 7, "Q5_1", 32, 24)                                                                      \
  X(Q8_0, 8, "Q8_0", 32, 34)                                                                      \
  X(Q8_1, 9, "Q8_1", 32, 36)                                                                      \
  X(Q2_K, 10, "Q2_K", 256, 84) X(Q3_K, 11, "Q3_K", 256, 110) X(Q4_K, 12, "Q4_K", 256, 144)        \
  X(Q5_K, 13, "Q5_K", 256, 176) X(Q6_K, 14, "Q6_K", 256, 210) X(Q8_K, 15, "Q8_K", 256, 292)       \
  X(IQ2_XXS, 16, "IQ2_XXS", 256, 66)                                                              \
  X(IQ2_XS, 17, "IQ2_XS", 256, 74)                                                                \
  X(IQ3_XXS, 18, "IQ3_XXS", 256, 98)                                                              \
  X(IQ1_S, 19, "IQ1_S", 256, 50) X(IQ4_NL, 20, "IQ4_NL", 32, 18) X(IQ3_S, 21, "IQ3_S", 256, 110)  \
  X(IQ2_S, 22, "IQ2_S", 256, 82) X(IQ4_XS, 23, "IQ4_XS", 256, 136) X(I8, 24, "I8", 1, 1)          \
  X(I16, 25, "I16", 1, 2) X(I32, 26, "I32", 1, 4) X(I64, 27, "I64", 1, 8) X(F64, 28, "F64", 1, 8) \
  X(IQ1_M, 29, "IQ1_M", 256, 56) X(BF16, 30, "BF16", 1, 2) X(TQ1_0, 34, "TQ1_0", 256, 54)         \
  X(TQ2_0, 35, "TQ2_0", 256, 66) X(MXFP4, 39, "MXFP4", 32, 17)
// clang-format on
typedef enum ggml_type {
#define GGML_TYPE_ENUM(name, value, text, block, bytes) GGML_TYPE_##name = value,
  GGML_TYPES(GGML_TYPE_ENUM)
#undef GGML_TYPE_ENUM
} ggml_type_t;
/* "Q4_1"; for a removed number its old name ("Q4_2"), else NULL. */
const char *ggml_type_name(uint32_t type);
/* A type of the table above: gguf_open sizes its tensors. */
bool ggml_type_known(uint32_t type);
/* 4, 5, 31-33, 36-38: ggml's types once, refused by every GGUF reader today. */
bool ggml_type_removed(uint32_t type);
/* A type stored in blocks of several elements with scales (Q4_0, Q4_K, IQ4_XS, MXFP4, ...), as
 * against plain numbers (F32, F16, BF16, F64, I8..I64). false for an unknown type. */
bool ggml_type_quantized(uint32_t type);
/* Elements per block and bytes per block (1 and 4 for F32). 0 for an unknown type. */
uint32_t ggml_block_elems(ggml_type_t type);
uint32_t ggml_block_bytes(ggml_type_t type);

/* A string inside the mapped file: not NUL-terminated. */
typedef struct gguf_str {
  const char *ptr;
  uint64_t len;
} gguf_str_t;

/* One metadata entry. For arrays, type is GGUF_ARRAY, elem_type the elements' type, count their
 * number; data points at the first element (for string arrays: the first length word). For scalars
 * data points at the value (strings: the length word). bytes: the size of what data points at
 * (the values, each string with its length word). */
typedef struct gguf_kv {
  gguf_str_t key;
  uint32_t type, elem_type;
  uint64_t count;
  const uint8_t *data;
  uint64_t bytes;
} gguf_kv_t;

#define GGUF_MAX_DIMS 4
typedef struct gguf_tensor {
  const char *name;           /* NUL-terminated copy */
  uint32_t n_dims;            /* 1..GGUF_MAX_DIMS */
  uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous dimension; unused dims are 1 */
  ggml_type_t type;
  uint64_t offset;  /* from the start of the data section; a multiple of the alignment */
  uint64_t bytes;   /* ne[0] / block elems * block bytes * ne[1] * ... */
  const void *data; /* in the mapping */
} gguf_tensor_t;

typedef struct gguf_file gguf_file_t;

/* Maps and validates path: header, every metadata entry (strings and arrays within the file, known
 * types, no duplicate keys), every tensor info (a ggml type of GGML_TYPES, 1..4 dims each >= 1,
 * ne[0] a multiple of the type's block, element and byte counts that do not overflow, offsets
 * aligned, data inside the file, no two tensors overlapping, no duplicate names) and
 * general.alignment (a uint32 power of two). The file stays mapped until gguf_close. */
HCQ_MUST_USE hcq_status_t gguf_open(const char *path, gguf_file_t **out);
/* The same over bytes the caller keeps alive until gguf_close; name is used in messages. */
HCQ_MUST_USE hcq_status_t gguf_open_memory(const void *bytes, size_t size, const char *name,
                                           gguf_file_t **out);
void gguf_close(gguf_file_t *g); /* NULL is accepted */

const char *gguf_path(const gguf_file_t *g);
uint32_t gguf_version(const gguf_file_t *g);
uint64_t gguf_file_size(const gguf_file_t *g);
uint32_t gguf_alignment(const gguf_file_t *g);

size_t gguf_kv_count(const gguf_file_t *g);
const gguf_kv_t *gguf_kv_at(const gguf_file_t *g, size_t i);
/* NULL when absent. */
const gguf_kv_t *gguf_find_kv(const gguf_file_t *g, const char *key);

/* Typed getters: NOT_FOUND when absent (the message names the key and the file), INVALID_ARGUMENT
 * for another type or a value that does not fit. Integers accept any integer type whose value fits;
 * floats accept FLOAT32 and FLOAT64. */
HCQ_MUST_USE hcq_status_t gguf_get_u32(const gguf_file_t *g, const char *key, uint32_t *out);
HCQ_MUST_USE hcq_status_t gguf_get_i64(const gguf_file_t *g, const char *key, int64_t *out);
HCQ_MUST_USE hcq_status_t gguf_get_f32(const gguf_file_t *g, const char *key, float *out);
HCQ_MUST_USE hcq_status_t gguf_get_bool(const gguf_file_t *g, const char *key, bool *out);
HCQ_MUST_USE hcq_status_t gguf_get_str(const gguf_file_t *g, const char *key, gguf_str_t *out);
/* The same, leaving *out as it is and returning NULL when the key is absent. */
HCQ_MUST_USE hcq_status_t gguf_get_u32_or(const gguf_file_t *g, const char *key, uint32_t *out);
HCQ_MUST_USE hcq_status_t gguf_get_f32_or(const gguf_file_t *g, const char *key, float *out);
HCQ_MUST_USE hcq_status_t gguf_get_bool_or(const gguf_file_t *g, const char *key, bool *out);
/* A string array: *out is a malloc'd array of count strings pointing into the mapping (free it). */
HCQ_MUST_USE hcq_status_t gguf_get_str_array(const gguf_file_t *g, const char *key,
                                             gguf_str_t **out, uint64_t *count);
/* A numeric array of elem_type: a pointer to its first element in the mapping (possibly unaligned:
 * read with memcpy) and the count. INVALID_ARGUMENT when the elements are of another type. */
HCQ_MUST_USE hcq_status_t gguf_get_array(const gguf_file_t *g, const char *key, uint32_t elem_type,
                                         const void **out, uint64_t *count);

size_t gguf_tensor_count(const gguf_file_t *g);
const gguf_tensor_t *gguf_tensor_at(const gguf_file_t *g, size_t i);
const gguf_tensor_t *gguf_find_tensor(const gguf_file_t *g,
                                      const char *name); /* NULL when absent */

/* ---- writing (tests, hcq generate --write-model) ---- */
typedef struct gguf_writer gguf_writer_t;

HCQ_MUST_USE hcq_status_t gguf_writer_create(gguf_writer_t **out);
void gguf_writer_free(gguf_writer_t *w);
/* Metadata, in the order added (a repeated key replaces nothing: the file then has it twice). */
HCQ_MUST_USE hcq_status_t gguf_writer_add_u32(gguf_writer_t *w, const char *key, uint32_t v);
HCQ_MUST_USE hcq_status_t gguf_writer_add_f32(gguf_writer_t *w, const char *key, float v);
HCQ_MUST_USE hcq_status_t gguf_writer_add_bool(gguf_writer_t *w, const char *key, bool v);
HCQ_MUST_USE hcq_status_t gguf_writer_add_str(gguf_writer_t *w, const char *key, const char *v);
HCQ_MUST_USE hcq_status_t gguf_writer_add_str_array(gguf_writer_t *w, const char *key,
                                                    const char *const *v, size_t n);
HCQ_MUST_USE hcq_status_t gguf_writer_add_i32_array(gguf_writer_t *w, const char *key,
                                                    const int32_t *v, size_t n);
/* Raw: any value type with its bytes as they go in the file (for tests of odd files). */
HCQ_MUST_USE hcq_status_t gguf_writer_add_raw(gguf_writer_t *w, const char *key, uint32_t type,
                                              const void *bytes, size_t size);
/* A copy of another file's entry (its key, type and value as they are). */
HCQ_MUST_USE hcq_status_t gguf_writer_copy_kv(gguf_writer_t *w, const gguf_kv_t *kv);
/* A tensor: data holds its bytes in the type's layout (ggml_block_bytes per block); copied. */
HCQ_MUST_USE hcq_status_t gguf_writer_add_tensor(gguf_writer_t *w, const char *name,
                                                 ggml_type_t type, const uint64_t *ne,
                                                 uint32_t n_dims, const void *data);
/* Version 3 unless set (2 or 3); alignment 32 unless set, written as general.alignment when not 32.
 */
void gguf_writer_set_version(gguf_writer_t *w, uint32_t version);
HCQ_MUST_USE hcq_status_t gguf_writer_set_alignment(gguf_writer_t *w, uint32_t alignment);
/* The whole file in memory (malloc'd; free it) or written to path. */
HCQ_MUST_USE hcq_status_t gguf_writer_bytes(const gguf_writer_t *w, uint8_t **out,
                                            size_t *out_size);
HCQ_MUST_USE hcq_status_t gguf_writer_write(const gguf_writer_t *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif
