/* Loading hcq-graph/1 files with Jansson: every field validated, errors with the JSON path. This
 * file reads the file as a whole (its sections, in order) and holds what outlives the load: the
 * loaded file, its devices (opened through the device map) and the accessors. The sections'
 * readers are the other graphfile_*.c files (graphfile_internal.h lists them). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/remote.h"
#include "core/vec.h"
#include "hcq/graphfile.h"
#include "io/graphfile_internal.h"

/* ---- the loaded file ---- */

static void gf_free(hcq_graph_file_t *gf) {
  if (!gf) return;
  for (size_t i = 0; i < gf->items.len; i++) {
    hcq_exec_item_t *it = &gf->items.data[i];
    if (it->kind != HCQ_ITEM_KERNEL) continue;
    for (size_t k = 0; k < it->kernel.nvals; k++) hcq_expr_release(it->kernel.vals[k].sym);
    for (int k = 0; k < 3; k++) {
      hcq_expr_release(it->kernel.global[k].sym);
      hcq_expr_release(it->kernel.local[k].sym);
    }
    free((void *)it->kernel.bufs);
    free((void *)it->kernel.outs);
    free((void *)it->kernel.vals);
  }
  hcq__vec_free(&gf->items);
  for (size_t i = 0; i < gf->runs.len; i++) {
    free(gf->runs.data[i].inputs);
    free(gf->runs.data[i].vals);
  }
  hcq__vec_free(&gf->runs);
  free(gf->inputs);
  for (size_t i = 0; i < gf->programs.len; i++) {
    gf_program_t *p = &gf->programs.data[i];
    for (size_t d = 0; d < p->ncompiled; d++) hcq_program_release(p->compiled[d]);
    free(p->name);
    free(p->entry);
    for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) free(p->sources[k]);
  }
  hcq__vec_free(&gf->programs);
  for (size_t i = gf->buffers.len; i-- > 0;) {
    gf_buffer_t *b = &gf->buffers.data[i];
    hcq_buffer_release(b->buf);
    free(b->name);
    free(b->init_data);
  }
  hcq__vec_free(&gf->buffers);
  for (size_t i = 0; i < gf->vars.len; i++) hcq_expr_release(gf->vars.data[i].var);
  hcq__vec_free(&gf->vars);
  for (size_t i = 0; i < gf->ndevices; i++) hcq_status_destroy(hcq_device_close(gf->devices[i]));
  hcq__htab_free(&gf->buffer_names);
  hcq__htab_free(&gf->program_names);
  hcq__htab_free(&gf->var_names);
  free(gf);
}

void hcq_graph_file_destroy(hcq_graph_file_t *gf) { gf_free(gf); }

/* ---- devices and the device map ---- */

/* Checks the map's syntax: comma-separated FROM=TO entries, both sides non-empty. */
static hcq_status_t check_device_map(const char *map) {
  if (!map || !*map) return NULL;
  char buf[512];
  if (strlen(map) >= sizeof(buf))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "device map is longer than %zu bytes",
                           sizeof(buf) - 1);
  snprintf(buf, sizeof(buf), "%s", map);
  for (char *save = NULL, *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(e, '=');
    if (!eq || eq == e || !eq[1] || strchr(eq + 1, '='))
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "device map entry \"%s\" is not FROM=TO (e.g. CPU=CUDA or CPU:1=CPU:0)", e);
  }
  return NULL;
}

/* Applies the map to a device name: exact names first ("CPU" counts as "CPU:0"), then kinds
 * ("CPU=CUDA" keeps the index). */
static void map_device(const char *map, const char *name, char *out, size_t size) {
  snprintf(out, size, "%s", name);
  if (!map || !*map) return;
  const char *colon = strchr(name, ':');
  size_t kind_len = colon ? (size_t)(colon - name) : strlen(name);
  const char *index = colon ? colon + 1 : "0";
  char full[160];
  snprintf(full, sizeof(full), "%.*s:%s", (int)kind_len, name, index);
  for (int exact = 1; exact >= 0; exact--) {
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", map);
    for (char *save = NULL, *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
      char *eq = strchr(e, '=');
      if (!eq) continue;
      *eq = '\0';
      const char *from = e, *to = eq + 1;
      if (exact && strchr(from, ':') && !strcasecmp(from, full)) {
        snprintf(out, size, "%s", to);
        return;
      }
      if (!exact && !strchr(from, ':') && strlen(from) == kind_len &&
          !strncasecmp(from, name, kind_len)) {
        snprintf(out, size, "%s:%s", to, index);
        return;
      }
    }
  }
}

hcq_status_t hcq__gf_open_device(gf_loader_t *L, const char *name, hcq_device_t **out) {
  hcq_graph_file_t *gf = L->gf;
  char mapped[128];
  map_device(L->opts->device_map, name, mapped, sizeof(mapped));
  if (atomic_load(&hcq__remote) && !strchr(mapped, '/')) {
    /* Under MPI (docs/mpi.md) a file describes one job run by every rank: a device the map does not
     * send to a rank is rank 0's, on every rank (plain names would mean each rank's own). */
    char qualified[sizeof(mapped)];
    snprintf(qualified, sizeof(qualified), "0/%.120s", mapped);
    snprintf(mapped, sizeof(mapped), "%s", qualified);
  }
  hcq_device_t *dev = NULL;
  hcq_status_t st = hcq_device_open(mapped, &dev);
  if (st) return hcq__gf_wrap(L, st);
  for (size_t i = 0; i < gf->ndevices; i++)
    if (gf->devices[i] == dev) {
      hcq_status_destroy(hcq_device_close(dev)); /* one reference per device is enough */
      *out = dev;
      return NULL;
    }
  if (gf->ndevices == GF_MAX_DEVICES) {
    hcq_status_destroy(hcq_device_close(dev));
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "a graph file uses at most %d devices",
                        GF_MAX_DEVICES);
  }
  gf->devices[gf->ndevices++] = dev;
  *out = dev;
  return NULL;
}

/* "format": "hcq-graph/1", nothing else. */
static hcq_status_t check_format(gf_loader_t *L, const json_t *format) {
  size_t m = hcq__gf_push(L, "format");
  hcq_status_t st = NULL;
  if (!format)
    st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "missing (\"format\": \"hcq-graph/1\")");
  else if (!json_is_string(format) || strcmp(json_string_value(format), "hcq-graph/1"))
    st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must be \"hcq-graph/1\"");
  hcq__gf_pop(L, m);
  return st;
}

/* The parsed document root, section by section in the order they depend on each other. */
static hcq_status_t load_root(gf_loader_t *L, const json_t *root) {
  static const char *const keys[] = {"format", "vars",   "buffers", "programs",
                                     "items",  "inputs", "runs",    NULL};
  HCQ__TRY(hcq__gf_expect(L, root, JSON_OBJECT, "a JSON object"));
  HCQ__TRY(hcq__gf_only_keys(L, root, keys));
  HCQ__TRY(check_format(L, json_object_get(root, "format")));
  HCQ__TRY(hcq__gf_parse_vars(L, json_object_get(root, "vars")));
  HCQ__TRY(hcq__gf_parse_buffers(L, json_object_get(root, "buffers")));
  HCQ__TRY(hcq__gf_parse_programs(L, json_object_get(root, "programs")));
  HCQ__TRY(hcq__gf_parse_items(L, json_object_get(root, "items")));
  HCQ__TRY(hcq__gf_parse_inputs(L, json_object_get(root, "inputs")));
  HCQ__TRY(hcq__gf_parse_runs(L, json_object_get(root, "runs")));
  return hcq__gf_check_items(L);
}

static hcq_status_t load(gf_loader_t *L, const char *text, size_t len) {
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s:%d:%d: %s", L->name,
                           err.line < 0 ? 0 : err.line, err.column < 0 ? 0 : err.column, err.text);
  }
  hcq_status_t st = load_root(L, root);
  json_decref(root);
  return st;
}

hcq_status_t hcq_graph_file_load_text(const char *text, size_t len, const char *name,
                                      const char *base_dir, const hcq_graph_file_options_t *options,
                                      hcq_graph_file_t **out_file) {
  if (!out_file)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load_text: out_file is NULL");
  *out_file = NULL;
  if (!text && len)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load_text: text is NULL");
  static const hcq_graph_file_options_t defaults;
  gf_loader_t L = {NULL, name ? name : "<graph>", base_dir, options ? options : &defaults, "", 0};
  hcq_status_t map_st = check_device_map(L.opts->device_map);
  if (map_st) return map_st;
  L.gf = calloc(1, sizeof(*L.gf));
  if (!L.gf) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading %s", L.name);
  hcq_status_t st = load(&L, text ? text : "", len);
  free(L.input_of);
  free(L.var_exprs);
  if (st) goto fail;
  for (size_t i = 0; i < L.gf->buffers.len; i++)
    if (!L.gf->buffers.data[i].is_view && (st = hcq__gf_write_init(&L.gf->buffers.data[i])))
      goto fail;
  *out_file = L.gf;
  return NULL;
fail:
  /* Initial copies may still be in flight: let them land before freeing. */
  for (size_t i = 0; i < L.gf->ndevices; i++)
    hcq_status_destroy(hcq_device_synchronize(L.gf->devices[i]));
  gf_free(L.gf);
  return st;
}

hcq_status_t hcq_graph_file_load(const char *path, const hcq_graph_file_options_t *options,
                                 hcq_graph_file_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load: out_file is NULL");
  *out = NULL;
  if (!path) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load: path is NULL");
  gf_loader_t L = {NULL, path, NULL, options, "", 0};
  char *text;
  size_t len;
  struct stat sb;
  if (stat(path, &sb) != 0)
    return hcq_status_make(HCQ_NOT_FOUND, "cannot read graph file %s: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) /* hcq__gf_read_file checks again on what it opens */
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: cannot read graph file: it is %s, not a regular file", path,
                           hcq__gf_file_type(sb.st_mode));
  hcq_status_t st = hcq__gf_read_file(&L, path, &text, &len);
  if (st) return hcq_status_annotate(st, "cannot read graph file %s", path);
  /* The folder, whole (a copy cut at PATH_MAX would resolve sources somewhere else). */
  const char *slash = strrchr(path, '/');
  char *dir = slash == path ? strdup("/")
              : slash       ? strndup(path, (size_t)(slash - path))
                            : strdup(".");
  if (!dir) {
    free(text);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading %s", path);
  }
  st = hcq_graph_file_load_text(text, len, path, dir, options, out);
  free(dir);
  free(text);
  return st;
}

hcq_status_t hcq_graph_file_reset(hcq_graph_file_t *gf) {
  if (!gf) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_reset: file is NULL");
  for (size_t i = 0; i < gf->buffers.len; i++) {
    if (gf->buffers.data[i].is_view) continue;
    hcq_status_t st = hcq__gf_write_init(&gf->buffers.data[i]);
    if (st) return st;
  }
  return NULL;
}

size_t hcq_graph_file_item_count(const hcq_graph_file_t *gf) { return gf ? gf->items.len : 0; }
const hcq_exec_item_t *hcq_graph_file_items(const hcq_graph_file_t *gf) {
  return gf ? gf->items.data : NULL;
}
size_t hcq_graph_file_input_count(const hcq_graph_file_t *gf) { return gf ? gf->ninputs : 0; }
hcq_buffer_t *const *hcq_graph_file_inputs(const hcq_graph_file_t *gf) {
  return gf ? gf->inputs : NULL;
}
size_t hcq_graph_file_var_count(const hcq_graph_file_t *gf) { return gf ? gf->vars.len : 0; }
const hcq_var_value_t *hcq_graph_file_vars(const hcq_graph_file_t *gf) {
  return gf ? gf->vars.data : NULL;
}
size_t hcq_graph_file_buffer_count(const hcq_graph_file_t *gf) { return gf ? gf->buffers.len : 0; }
const char *hcq_graph_file_buffer_name(const hcq_graph_file_t *gf, size_t i) {
  return gf && i < gf->buffers.len ? gf->buffers.data[i].name : NULL;
}
hcq_buffer_t *hcq_graph_file_buffer(const hcq_graph_file_t *gf, size_t i) {
  return gf && i < gf->buffers.len ? gf->buffers.data[i].buf : NULL;
}
size_t hcq_graph_file_device_count(const hcq_graph_file_t *gf) { return gf ? gf->ndevices : 0; }
hcq_device_t *hcq_graph_file_device(const hcq_graph_file_t *gf, size_t i) {
  return gf && i < gf->ndevices ? gf->devices[i] : NULL;
}
size_t hcq_graph_file_run_count(const hcq_graph_file_t *gf) { return gf ? gf->runs.len : 0; }
void hcq_graph_file_run(const hcq_graph_file_t *gf, size_t r, hcq_buffer_t *const **out_inputs,
                        const hcq_var_value_t **out_vals) {
  if (out_inputs) *out_inputs = gf && r < gf->runs.len ? gf->runs.data[r].inputs : NULL;
  if (out_vals) *out_vals = gf && r < gf->runs.len ? gf->runs.data[r].vals : NULL;
}
