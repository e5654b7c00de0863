/* The bytes a graph file brings in besides its JSON: files it names ({"file": path}, {"binary":
 * path}, an init's "file"), base64 text, and the initial contents of its buffers, generated or
 * given. Reading a named file is where a loader meets the file system (a FIFO, a huge file, a
 * path too long), so it is done once, here, for every field that names one. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/graphfile_internal.h"

#define MAX_FILE_BYTES (64u << 20)

/* ---- file contents from {"file": path} ---- */

const char *hcq__gf_file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

/* Opens a regular file for reading, never blocking: a FIFO (or a character device) would wait
 * for a writer forever, or stream without end, so anything else is refused by type. */
static hcq_status_t open_regular(gf_loader_t *L, const char *path, FILE **out) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return hcq__gf_fail(L, HCQ_NOT_FOUND, "cannot open \"%s\": %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return hcq__gf_fail(L, HCQ_UNAVAILABLE, "cannot read \"%s\": %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "\"%s\" is %s, not a regular file", path,
                        hcq__gf_file_type(sb.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *out = fdopen(fd, "rb");
  if (!*out) {
    close(fd);
    return hcq__gf_oom(L);
  }
  return NULL;
}

hcq_status_t hcq__gf_read_file(gf_loader_t *L, const char *rel, char **out, size_t *out_len) {
  /* The whole path or an error: a path cut at PATH_MAX could name another file that exists. */
  bool relative = rel[0] != '/' && L->base_dir && *L->base_dir;
  size_t need = (relative ? strlen(L->base_dir) + 1 : 0) + strlen(rel);
  if (need >= PATH_MAX)
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "path \"%.80s%s\" is too long: %zu bytes%s, the limit (PATH_MAX) is %d",
                        rel, strlen(rel) > 80 ? "..." : "", need,
                        relative ? " with the graph file's folder" : "", PATH_MAX - 1);
  char *full = malloc(need + 1);
  if (!full) return hcq__gf_oom(L);
  snprintf(full, need + 1, relative ? "%s/%s" : "%s%s", relative ? L->base_dir : "", rel);
  FILE *f;
  hcq_status_t st = open_regular(L, full, &f);
  if (st) {
    free(full);
    return st;
  }
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (ferror(f)) {
      int e = errno;
      free(buf);
      fclose(f);
      st = hcq__gf_fail(L, HCQ_UNAVAILABLE, "cannot read \"%s\": %s", full, strerror(e));
      free(full);
      return st;
    }
    if (len < cap) break;
    if (cap >= MAX_FILE_BYTES) {
      free(buf);
      fclose(f);
      st =
          hcq__gf_fail(L, HCQ_OUT_OF_RANGE, "\"%s\" is larger than %u bytes", full, MAX_FILE_BYTES);
      free(full);
      return st;
    }
    cap *= 2;
    char *nb = realloc(buf, cap + 1);
    if (!nb) free(buf);
    buf = nb;
  }
  fclose(f);
  free(full);
  if (!buf) return hcq__gf_oom(L);
  buf[len] = '\0';
  *out = buf;
  *out_len = len;
  return NULL;
}

/* ---- base64 (the "base64" init, used by saved files) ---- */

static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes into out (exactly size bytes expected); false on malformed input or a size mismatch. */
static bool b64_decode(const char *s, uint8_t *out, size_t size) {
  size_t n = strlen(s), o = 0;
  if (n % 4) return false;
  for (size_t i = 0; i < n; i += 4) {
    int v[4];
    for (int k = 0; k < 4; k++) v[k] = s[i + k] == '=' ? -2 : b64_value(s[i + k]);
    if (v[0] < 0 || v[1] < 0 || v[2] == -1 || v[3] == -1 || (v[2] == -2 && v[3] != -2))
      return false;
    if ((v[2] == -2 || v[3] == -2) && i + 4 != n) return false;
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                 (uint32_t)(v[2] < 0 ? 0 : v[2]) << 6 | (uint32_t)(v[3] < 0 ? 0 : v[3]);
    int bytes = v[2] == -2 ? 1 : v[3] == -2 ? 2 : 3;
    for (int k = 0; k < bytes; k++) {
      if (o >= size) return false;
      out[o++] = (uint8_t)(w >> (16 - 8 * k));
    }
  }
  return o == size;
}

/* ---- initial contents ---- */

/* The i-th output (0-based) of the SplitMix64 stream of seed, without producing the ones before. */
static uint64_t splitmix64_at(uint64_t seed, uint64_t i) {
  uint64_t z = seed + UINT64_C(0x9E3779B97F4A7C15) * (i + 1);
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* uniform_f32: lo + (hi - lo) * u in float, u in [0, 1). The sum can round up to hi itself (u near
 * 1 and lo + (hi - lo) * u within half a step of hi: [1, 2) does it at the largest u); such values
 * become the largest float below hi, so that lo <= x < hi holds as documented. */
static float uniform_f32_at(float lo, float hi, float u) {
  float x = lo + (hi - lo) * u;
  return x >= hi && lo < hi ? nextafterf(hi, lo) : x;
}

/* uniform_f32 word i: u = the top 24 bits of output i / 2^24. */
static uint32_t uniform_f32_word(const gf_buffer_t *b, uint64_t i) {
  float u = (float)(splitmix64_at(b->init_value, i) >> 40) * (1.0f / 16777216.0f);
  float x = uniform_f32_at(b->init_lo, b->init_hi, u);
  uint32_t w;
  memcpy(&w, &x, 4);
  return w;
}

static hcq_status_t parse_uniform_f32(gf_loader_t *L, const json_t *v, gf_buffer_t *b) {
  static const char *const keys[] = {"seed", "lo", "hi", NULL};
  HCQ__TRY(hcq__gf_expect(L, v, JSON_OBJECT, "an object {\"seed\": S, \"lo\": A, \"hi\": B}"));
  HCQ__TRY(hcq__gf_only_keys(L, v, keys));
  const char *names[3] = {"seed", "lo", "hi"};
  for (int k = 0; k < 3; k++)
    if (!json_object_get(v, names[k]))
      return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "needs \"%s\"", names[k]);
  int64_t seed;
  HCQ__TRY(hcq__gf_get_int_at(L, ".seed", json_object_get(v, "seed"), 0, INT64_MAX, &seed));
  b->init_value = (uint64_t)seed;
  HCQ__TRY(hcq__gf_get_f32_at(L, ".lo", json_object_get(v, "lo"), &b->init_lo));
  HCQ__TRY(hcq__gf_get_f32_at(L, ".hi", json_object_get(v, "hi"), &b->init_hi));
  if (!(b->init_lo <= b->init_hi)) {
    size_t m = hcq__gf_push(L, ".hi");
    hcq_status_t st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "%g is below lo %g", (double)b->init_hi,
                                   (double)b->init_lo);
    hcq__gf_pop(L, m);
    return st;
  }
  /* hi - lo past FLT_MAX would make every value +inf (NaN at u = 0), not lo <= x < hi. */
  if (!isfinite(b->init_hi - b->init_lo))
    return hcq__gf_fail(
        L, HCQ_OUT_OF_RANGE,
        "lo %.9g, hi %.9g: hi - lo overflows a float, so the values would be infinite",
        json_number_value(json_object_get(v, "lo")), json_number_value(json_object_get(v, "hi")));
  return NULL;
}

void hcq_graph_file_random_bytes(uint64_t seed, void *dst, size_t size) {
  uint8_t *p = dst;
  uint64_t state = seed;
  for (size_t i = 0; i < size; i += 8) {
    state += UINT64_C(0x9E3779B97F4A7C15);
    uint64_t z = state;
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    for (size_t k = 0; k < 8 && i + k < size; k++) p[i + k] = (uint8_t)(z >> (8 * k));
  }
}

hcq_status_t hcq__gf_parse_init(gf_loader_t *L, const json_t *j, gf_buffer_t *b) {
  size_t m = hcq__gf_push(L, ".init");
  hcq_status_t st = NULL;
  if (json_is_string(j)) {
    const char *s = json_string_value(j);
    if (!strcmp(s, "zeros"))
      b->init = GF_INIT_ZEROS;
    else if (!strcmp(s, "iota32"))
      b->init = GF_INIT_IOTA32;
    else
      st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "unknown init \"%.64s\" (zeros, iota32, {\"random\": SEED}, {\"fill32\": "
                        "N}, {\"fill_f32\": X}, "
                        "{\"uniform_f32\": {...}})",
                        s);
  } else if (json_is_object(j)) {
    static const char *const keys[] = {"random", "fill32", "fill_f32", "uniform_f32",
                                       "base64", "file",   NULL};
    if ((st = hcq__gf_only_keys(L, j, keys))) goto out;
    if (json_object_size(j) != 1) {
      st = hcq__gf_fail(
          L, HCQ_INVALID_ARGUMENT,
          "must have exactly one of random, fill32, fill_f32, uniform_f32, base64, file");
      goto out;
    }
    const char *key = json_object_iter_key(json_object_iter((json_t *)j));
    const json_t *v = json_object_iter_value(json_object_iter((json_t *)j));
    size_t m2 = hcq__gf_push(L, ".%s", key);
    int64_t n;
    if (!strcmp(key, "random")) {
      b->init = GF_INIT_RANDOM;
      if (!(st = hcq__gf_get_int(L, v, 0, INT64_MAX, &n))) b->init_value = (uint64_t)n;
    } else if (!strcmp(key, "fill32")) {
      b->init = GF_INIT_FILL32;
      if (!(st = hcq__gf_get_int(L, v, INT32_MIN, UINT32_MAX, &n))) b->init_value = (uint32_t)n;
    } else if (!strcmp(key, "fill_f32")) {
      float x;
      b->init = GF_INIT_FILL32;
      if (!(st = hcq__gf_get_f32(L, v, &x))) {
        uint32_t w;
        memcpy(&w, &x, 4);
        b->init_value = w;
      }
    } else if (!strcmp(key, "uniform_f32")) {
      b->init = GF_INIT_UNIFORM_F32;
      st = parse_uniform_f32(L, v, b);
    } else {
      b->init = GF_INIT_DATA;
      char *data = NULL;
      size_t len = 0;
      if (!strcmp(key, "base64")) {
        if (!(st = hcq__gf_expect(L, v, JSON_STRING, "base64 text"))) {
          data = malloc(b->bytes ? b->bytes : 1);
          if (!data)
            st = hcq__gf_oom(L);
          else if (!b64_decode(json_string_value(v), (uint8_t *)data, b->bytes))
            st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "is not base64 of exactly %" PRIu64 " bytes",
                              b->bytes);
        }
      } else if (!(st = hcq__gf_expect(L, v, JSON_STRING, "a path")) &&
                 !(st = hcq__gf_read_file(L, json_string_value(v), &data, &len)) &&
                 len != b->bytes) {
        st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                          "the file has %zu bytes but the buffer has %" PRIu64, len, b->bytes);
      }
      if (st)
        free(data);
      else
        b->init_data = data;
    }
    hcq__gf_pop(L, m2);
  } else {
    st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must be \"zeros\", \"iota32\" or an object, not %s",
                      hcq__gf_type_name(j));
  }
out:
  hcq__gf_pop(L, m);
  return st;
}

/* Writes a base buffer's initial contents (through the device's copyin, so it is ordered). */
/* Bytes [done, done + n) of b's generated contents into tmp; *state is the random generator's,
 * advanced by a chunk (the generator is sequential: the stream is made chunk by chunk). */
static void generate_chunk(const gf_buffer_t *b, uint64_t *state, uint64_t done, size_t n,
                           size_t chunk, uint8_t *tmp) {
  if (b->init == GF_INIT_RANDOM) {
    hcq_graph_file_random_bytes(*state, tmp, n);
    *state += UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(chunk / 8);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t at = done + i;
    uint32_t word = b->init == GF_INIT_IOTA32        ? (uint32_t)(at / 4)
                    : b->init == GF_INIT_FILL32      ? (uint32_t)b->init_value
                    : b->init == GF_INIT_UNIFORM_F32 ? uniform_f32_word(b, at / 4)
                                                     : 0;
    tmp[i] = (uint8_t)(word >> (8 * (at % 4)));
  }
}

hcq_status_t hcq__gf_write_init(const gf_buffer_t *b) {
  if (b->init == GF_INIT_DATA) return hcq_buffer_copyin(b->buf, 0, b->init_data, b->bytes);
  /* Small buffers get a small scratch: a file of 100k tiny buffers must not map 100k MiB. */
  size_t chunk = b->bytes < (1u << 20) ? (size_t)(b->bytes + 7) / 8 * 8 : 1u << 20;
  uint8_t *tmp = malloc(chunk);
  if (!tmp) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory initializing %s", b->name);
  hcq_status_t st = NULL;
  uint64_t state = b->init_value;
  for (uint64_t done = 0; done < b->bytes; done += chunk) {
    size_t n = b->bytes - done < chunk ? (size_t)(b->bytes - done) : chunk;
    generate_chunk(b, &state, done, n, chunk, tmp);
    if ((st = hcq_buffer_copyin(b->buf, done, tmp, n))) break;
  }
  free(tmp);
  return st;
}
